//go:build !unix

package main

import (
	"errors"
	"os"
)

// errNoSIGSTOP: the fencing demo pauses client A with SIGSTOP.
var errNoSIGSTOP = errors.New("the fencing demo pauses a process with SIGSTOP, which needs a Unix system")

func pauseProcess(*os.Process) error  { return errNoSIGSTOP }
func resumeProcess(*os.Process) error { return errNoSIGSTOP }
