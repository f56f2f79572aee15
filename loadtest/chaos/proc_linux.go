//go:build linux

package chaos

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process in its own process group. The kernel kills it if
// the harness dies (Pdeathsig); kill ends it and everything it started on
// every other exit path.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed once the child is reaped
	err    error         // the exit, valid after exited closes

	mu      sync.Mutex
	stopped bool // SIGSTOPped and not yet continued
	ended   bool // the harness asked it to end (kill, end)
}

// childEnv is the harness's environment without LEASEGATE_* variables,
// which the leasegate command would read as flags.
func childEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LEASEGATE_") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// startProc starts exe with args; stdout goes to stdout (nil: the log) and
// stderr to the log file at logPath (appended, so restarts keep history).
func startProc(name, exe string, args, env []string, logPath string, stdout io.Writer) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(lf, "=== %s start %s %s\n", time.Now().Format(time.RFC3339Nano), exe, strings.Join(args, " "))
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.Stderr = lf
	cmd.Stdout = lf
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: lf, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(lf, "=== %s exit: %v\n", time.Now().Format(time.RFC3339Nano), p.err)
		lf.Close()
		close(p.exited)
	}()
	return p, nil
}

// pid is the child's process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// signal sends sig to the child's whole process group.
func (p *proc) signal(sig syscall.Signal) error {
	select {
	case <-p.exited:
		return errors.New(p.name + " has exited")
	default:
	}
	return syscall.Kill(-p.pid(), sig)
}

// pause stops the process group (SIGSTOP), as a long GC pause or a frozen
// VM would.
func (p *proc) pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.stopped = true
	return nil
}

// resume continues a paused process group (SIGCONT).
func (p *proc) resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = false
	return p.signal(syscall.SIGCONT)
}

// end sends sig, a signal that asks the child to end (SIGTERM), to its
// process group: an exit after it is one the harness asked for.
func (p *proc) end(sig syscall.Signal) error {
	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
	return p.signal(sig)
}

// unasked reports, once the child has exited, whether it exited without
// the harness asking it to (a crash).
func (p *proc) unasked() bool {
	<-p.exited
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.ended
}

// kill SIGKILLs the process group and waits, at most 10 s, for the child to
// be reaped. SIGKILL ends a stopped process too. It is idempotent.
func (p *proc) kill() {
	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
	}
}

// alive reports whether the child has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}
