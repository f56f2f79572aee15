package testbed

import "syscall"

// childAttr makes a child die with the load test, even on a crash.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
