package main

import (
	"os/exec"
	"syscall"
	"unsafe"
)

// commandAttr starts CMD in a process group of its own (whose id is CMD's
// pid) and, as a second line behind the supervisor, has the kernel kill CMD
// if the supervisor dies. That reaches CMD alone, not what it started.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// selfExe is the path that re-executes leasectl; it works even when the
// binary was replaced or removed since leasectl started.
func selfExe() (string, error) { return "/proc/self/exe", nil }

// watchExit reports CMD's exit on exited without reaping it, so that CMD's
// pid, and with it the id of its process group, stays taken until reap: a
// group kill between the two cannot hit a process that reused the id. reap
// waits for CMD and returns what exec.Cmd.Wait returns.
func watchExit(cmd *exec.Cmd) (exited <-chan struct{}, reap func() error) {
	const pPID = 1 // waitid's P_PID
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		var info [128]byte // siginfo_t, unused: only the wait matters
		for {
			_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(cmd.Process.Pid),
				uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
			if errno != syscall.EINTR {
				return
			}
		}
	}()
	return ch, cmd.Wait
}
