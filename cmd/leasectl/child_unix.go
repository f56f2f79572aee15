//go:build unix

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// CMD runs in a process group of its own, so that a signal reaches every
// process it started; but then neither the terminal's signals nor
// leasectl's death reach it. Were leasectl killed (SIGKILL, the OOM killer),
// CMD would run on without the lock, beside the next holder once the TTL
// lapsed. So CMD runs under a supervisor: leasectl itself, re-executed with
// superviseArg (supervise_unix.go). The supervisor holds the read end of a
// pipe whose only write end is leasectl's, relays the signals leasectl
// writes to it to CMD's process group, and kills that group when the pipe
// reaches end of file, which it does however leasectl ends.
//
// The protocol, on the supervisor's file descriptors 3 and 4:
//
//	fd 3, control (leasectl → supervisor): one byte per signal to send to
//	      CMD's process group; end of file: leasectl is gone, kill the group.
//	fd 4, status (supervisor → leasectl), one line each:
//	      "pid N"    CMD started as process N, the id of its process group;
//	      "fail MSG" CMD could not be started;
//	      "exit N"   CMD ended with shell status N and its group was killed.

// stopSignals tell leasectl to stop: before CMD starts they keep it from
// starting; after, they are forwarded to CMD's process group, which then has
// --grace to exit. The terminal sends SIGHUP, SIGINT and SIGQUIT.
var stopSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM}

// relaySignals are only forwarded to CMD's process group; leasectl ignores
// them before CMD starts.
var relaySignals = []os.Signal{syscall.SIGUSR1, syscall.SIGUSR2}

// child is CMD, run by its supervisor.
type child struct {
	argv0 string
	sup   *exec.Cmd
	ctl   *os.File       // write end of the control pipe
	done  chan childExit // how CMD ended, once CMD and its process group are gone
}

// startChild starts the supervisor, which starts argv with environment env.
// It does not wait for CMD to start: a failure to start is reported by
// exited, as status 127.
func startChild(argv, env []string) (*child, error) {
	exe, err := selfExe()
	if err != nil {
		return nil, fmt.Errorf("start the supervisor of %s: %w", argv[0], err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start the supervisor of %s: %w", argv[0], err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, fmt.Errorf("start the supervisor of %s: %w", argv[0], err)
	}
	sup := &exec.Cmd{
		Path:   exe,
		Args:   append([]string{"leasectl", superviseArg}, argv...),
		Env:    env,
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		// os.Pipe's descriptors are close-on-exec, so only these copies
		// reach the supervisor, and nothing else inherits the write end
		// whose end of file signals leasectl's death.
		ExtraFiles: []*os.File{ctlR, stW},
	}
	err = sup.Start()
	// The supervisor holds its ends now; leasectl must not keep them, or
	// neither side would ever see end of file.
	ctlR.Close()
	stW.Close()
	if err != nil {
		ctlW.Close()
		stR.Close()
		return nil, fmt.Errorf("start the supervisor of %s: %w", argv[0], err)
	}
	c := &child{argv0: argv[0], sup: sup, ctl: ctlW, done: make(chan childExit, 1)}
	go c.watch(stR)
	return c, nil
}

// signal asks the supervisor to send sig to CMD's process group. It does
// not block: the supervisor reads the pipe continuously, and a request made
// before CMD started is delivered once it has.
func (c *child) signal(sig syscall.Signal) { _, _ = c.ctl.Write([]byte{byte(sig)}) }

// watch reads the supervisor's reports until it exits.
func (c *child) watch(status *os.File) {
	defer status.Close()
	pid, reported := 0, false
	var res childExit
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(sc.Text(), " ")
		switch verb {
		case "pid":
			pid, _ = strconv.Atoi(arg)
		case "fail":
			res, reported = childExit{status: 127, err: fmt.Errorf("start %s: %s", c.argv0, arg)}, true
		case "exit":
			n, err := strconv.Atoi(arg)
			if err != nil {
				n = exitError
			}
			res, reported = childExit{status: n}, true
		}
	}
	werr := c.sup.Wait()
	c.ctl.Close()
	if !reported {
		// Something killed the supervisor. The kernel killed CMD with it
		// (Pdeathsig, on Linux), but not what CMD started: kill the group
		// here, before the lock can be released. CMD may be reaped by now;
		// its pid stays taken as a group id while the group has members.
		if pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		res = childExit{status: exitError, err: fmt.Errorf("the supervisor of %s ended (%v) without reporting its exit; its process group was killed", c.argv0, werr)}
	}
	c.done <- res
}
