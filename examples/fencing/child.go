package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// childProc is client A of the fencing demo: a child process that reports
// events as JSON lines on its stdout and reads commands from its stdin.
// Its owner must call stop, which ends the process on every path.
type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan clientEvent // closed when the child's stdout ends

	quitOnce sync.Once
	quit     chan struct{} // closed when nobody reads events any more

	exited  chan struct{} // closed once the child is reaped
	waitErr error         // the child's exit, set before exited closes
}

// startChild starts exe with args, its stderr passed through to ours. It
// does not block.
func startChild(exe string, args ...string) (*childProc, error) {
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = childSysProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start client A (%s): %w", exe, err)
	}
	c := &childProc{
		cmd:    cmd,
		stdin:  stdin,
		events: make(chan clientEvent, 16),
		quit:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	go c.read(stdout)
	return c, nil
}

// read turns the child's stdout into events until it ends, then reaps the
// child: exec's Wait must follow the last read of the pipe.
func (c *childProc) read(stdout io.Reader) {
	defer func() {
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var ev clientEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			ev = clientEvent{Event: evError, Error: fmt.Sprintf("unreadable line %q", sc.Text())}
		}
		select {
		case c.events <- ev:
		case <-c.quit:
		}
	}
	close(c.events)
	// A line too long for the scanner ends the loop early; drain the rest
	// so the child never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, stdout)
}

// pid is the child's process id.
func (c *childProc) pid() int { return c.cmd.Process.Pid }

// pause stops the child with SIGSTOP; resume continues it with SIGCONT.
func (c *childProc) pause() error {
	if err := pauseProcess(c.cmd.Process); err != nil {
		return fmt.Errorf("pause client A (pid %d): %w", c.pid(), err)
	}
	return nil
}

func (c *childProc) resume() error {
	if err := resumeProcess(c.cmd.Process); err != nil {
		return fmt.Errorf("resume client A (pid %d): %w", c.pid(), err)
	}
	return nil
}

// send writes one line to the child's stdin.
func (c *childProc) send(line string) error {
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		return fmt.Errorf("tell client A %q: %w", line, err)
	}
	return nil
}

// await returns the next event of kind, handing other events to onOther. It
// fails if the child reports an error, exits first, or bound passes.
func (c *childProc) await(ctx context.Context, kind string, bound time.Duration, onOther func(clientEvent)) (clientEvent, error) {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-c.events:
			switch {
			case !ok:
				return ev, fmt.Errorf("client A ended its output (%s) before it reported %q", c.exitStatus(time.Second), kind)
			case ev.Event == kind:
				return ev, nil
			case ev.Event == evError:
				return ev, fmt.Errorf("client A: %s", ev.Error)
			}
			onOther(ev)
		case <-timer.C:
			return clientEvent{}, fmt.Errorf("client A did not report %q within %s", kind, bound)
		case <-ctx.Done():
			return clientEvent{}, ctx.Err()
		}
	}
}

// finish closes the child's stdin and waits up to bound for it to exit,
// handing the events it still reports to onOther; past bound it kills the
// child. It returns the child's exit error.
func (c *childProc) finish(bound time.Duration, onOther func(clientEvent)) error {
	_ = c.stdin.Close()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	events := c.events
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil // closed: the child's stdout ended
				continue
			}
			onOther(ev)
		case <-c.exited:
			// The reader closed events before reaping; tell what is left.
			if events != nil {
				for ev := range events {
					onOther(ev)
				}
			}
			return c.waitErr
		case <-timer.C:
			c.stop()
			return fmt.Errorf("client A still running %s after its write; killed it", bound)
		}
	}
}

// exitStatus describes how the child exited, waiting up to wait for it.
func (c *childProc) exitStatus(wait time.Duration) string {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-c.exited:
		if c.waitErr == nil {
			return "exit status 0"
		}
		return c.waitErr.Error()
	case <-timer.C:
		return "still running"
	}
}

// stop ends the child on any path: SIGKILL ends a stopped process too. It
// returns once the child is reaped. Calling it again is harmless.
func (c *childProc) stop() {
	c.quitOnce.Do(func() { close(c.quit) })
	_ = c.stdin.Close()
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Kill()
	<-c.exited
}
