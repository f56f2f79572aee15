//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
)

// supervise is the supervisor process (see child_unix.go): it runs argv in
// a new process group, relays leasectl's signal requests to that group, and
// kills the group when CMD exits or leasectl is gone. It returns the
// supervisor's exit status, which leasectl does not use: CMD's status
// travels on the status pipe.
func supervise(argv []string) int {
	// Pdeathsig is tied to the thread that forked CMD, not the process:
	// fork from the main thread, which lives as long as the process.
	runtime.LockOSThread()
	// The supervisor shares leasectl's process group, the terminal's
	// foreground group, so ^C, ^\ and a hangup reach it too; it must
	// outlive leasectl to clean up. Catch and discard rather than ignore:
	// an ignored signal stays ignored across exec, in CMD; a caught one is
	// reset to its default there. What leasectl left ignored stays so.
	signal.Notify(make(chan os.Signal, 1), handledSignals()...)

	ctl, status := os.NewFile(3, "control"), os.NewFile(4, "status")
	// Neither pipe belongs to CMD: one holding the status pipe would hide
	// the supervisor's death from leasectl.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	if len(argv) == 0 {
		fmt.Fprintln(status, "fail no command")
		return exitUsage
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = commandAttr()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(status, "fail %s\n", firstLine(err.Error()))
		return 0
	}
	pid := cmd.Process.Pid
	fmt.Fprintf(status, "pid %d\n", pid)

	reqs := make(chan syscall.Signal)
	go readRequests(ctl, reqs)
	exited, reap := watchExit(cmd)
	for {
		select {
		case sig, ok := <-reqs:
			if !ok {
				// leasectl is gone, however it ended: nothing it started
				// may outlive it.
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				_ = reap()
				return 0
			}
			_ = syscall.Kill(-pid, sig)
		case <-exited:
			// Kill what CMD left running before leasectl can release the
			// lock. Until reap, CMD's pid (the group's id) cannot be reused
			// (see watchExit).
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			fmt.Fprintf(status, "exit %d\n", statusOf(reap()))
			return 0
		}
	}
}

// readRequests delivers the signals requested on the control pipe and
// closes reqs at end of file (or on any error: leasectl is gone).
func readRequests(ctl io.Reader, reqs chan<- syscall.Signal) {
	defer close(reqs)
	var buf [64]byte
	for {
		n, err := ctl.Read(buf[:])
		for _, b := range buf[:n] {
			reqs <- syscall.Signal(b)
		}
		if err != nil {
			return
		}
	}
}
