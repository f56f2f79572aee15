package main

import "syscall"

// childSysProcAttr makes the kernel kill client A if the demo dies without
// cleaning up (say, SIGKILL while A is stopped): a stopped orphan would
// otherwise wait forever.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
