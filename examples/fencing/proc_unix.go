//go:build unix

package main

import (
	"os"
	"syscall"
)

// pauseProcess stops p with SIGSTOP, as a long GC pause or a frozen VM
// would: every goroutine of p stops, its renewals included.
func pauseProcess(p *os.Process) error { return syscall.Kill(p.Pid, syscall.SIGSTOP) }

// resumeProcess continues p with SIGCONT.
func resumeProcess(p *os.Process) error { return syscall.Kill(p.Pid, syscall.SIGCONT) }
