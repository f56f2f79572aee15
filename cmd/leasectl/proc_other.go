//go:build !unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Outside Unix there is no supervisor and no process group: CMD is
// leasectl's direct child, signals reach CMD alone (where one cannot be
// delivered, CMD is killed), and CMD outlives a leasectl that is killed.

// stopSignals tell leasectl to stop: before CMD starts they keep it from
// starting; after, they are forwarded to CMD, which then has --grace to
// exit.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// relaySignals are only forwarded to CMD; there are none here.
var relaySignals []os.Signal

// child is CMD, run directly.
type child struct {
	cmd  *exec.Cmd
	done chan childExit // how CMD ended
}

// startChild starts argv with environment env.
func startChild(argv, env []string) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		return nil, exitStatus{code: 127, err: fmt.Errorf("start %s: %w", argv[0], err)}
	}
	c := &child{cmd: cmd, done: make(chan childExit, 1)}
	go func() { c.done <- childExit{status: statusOf(cmd.Wait())} }()
	return c, nil
}

// signal sends sig to CMD, or kills CMD where sig cannot be delivered.
func (c *child) signal(sig syscall.Signal) {
	if err := c.cmd.Process.Signal(sig); err != nil {
		_ = c.cmd.Process.Kill()
	}
}

// supervise exists for main's sake: there is no supervisor here.
func supervise([]string) int {
	fmt.Fprintln(os.Stderr, "leasectl: no supervisor on this system")
	return exitUsage
}
