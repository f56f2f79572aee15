//go:build !unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

func setProcessGroup(*exec.Cmd) {}

// signalGroup signals p alone; where SIGTERM cannot be delivered, it kills.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if err := p.Signal(sig); err != nil {
		return p.Kill()
	}
	return nil
}
