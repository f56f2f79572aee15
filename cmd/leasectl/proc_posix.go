//go:build unix && !linux

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// commandAttr starts CMD in a process group of its own, whose id is CMD's
// pid. There is no Pdeathsig here: if the supervisor itself is killed,
// leasectl kills the group (child.watch).
func commandAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// selfExe is the path that re-executes leasectl.
func selfExe() (string, error) { return os.Executable() }

// watchExit reports CMD's exit on exited; reap returns what exec.Cmd.Wait
// returned. Without waitid's WNOWAIT, CMD is reaped before its group is
// killed, so in principle its pid, the group's id, could be reused by then
// (Linux does not have this gap).
func watchExit(cmd *exec.Cmd) (exited <-chan struct{}, reap func() error) {
	ch := make(chan struct{})
	var err error
	go func() {
		err = cmd.Wait()
		close(ch)
	}()
	return ch, func() error {
		<-ch
		return err
	}
}
