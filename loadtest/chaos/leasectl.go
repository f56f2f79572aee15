//go:build linux

package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// leasectl holders: `leasectl run --lock NAME -- CMD` processes, where CMD
// is this test binary in the cmd role. CMD writes its fencing token to the
// register every 50 ms without ever checking anything, and starts a child
// (the cmd-child role) that does the same, so CMD's process group has more
// than one process. Both hold the write end of a FIFO that only the harness
// reads: CMD first writes "start MONO PID TOKEN" to it, MONO its
// CLOCK_MONOTONIC reading, and the harness sees end of file the moment the
// last of them has exited. [start, end of file] is the interval the command
// ran, which no other holder's belief may overlap.
const (
	fifoEnv   = "LEASEGATE_CHAOS_FIFO"
	modeEnv   = "LEASEGATE_CHAOS_CMD_MODE" // "exit": SIGHUP and SIGTERM end CMD; "ignore": they do not
	runForEnv = "LEASEGATE_CHAOS_RUN_FOR"  // how long CMD runs before it exits by itself; 0: until killed
)

// runCmd is the cmd role.
func runCmd() error {
	fifo, err := os.OpenFile(os.Getenv(fifoEnv), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	start := monotonic()
	if os.Getenv(modeEnv) == "ignore" {
		signal.Ignore(syscall.SIGHUP, syscall.SIGTERM)
	}
	token := os.Getenv("LEASEGATE_FENCING_TOKEN")
	if _, err := fmt.Fprintf(fifo, "start %d %d %s\n", start, os.Getpid(), token); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(os.Environ(), roleEnv+"=cmd-child")
	child.ExtraFiles = []*os.File{fifo} // the child keeps the FIFO open too
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		return err
	}
	runFor, _ := time.ParseDuration(os.Getenv(runForEnv))
	var until <-chan time.Time
	if runFor > 0 {
		until = time.After(runFor)
	}
	for {
		writeToken(os.Getenv(idEnv), token)
		select {
		case <-until:
			// Exit, leaving the child behind: leasectl must kill it before
			// it releases the lock.
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runCmdChild is the cmd-child role: it writes the token until killed,
// holding the FIFO (its fd 3) open.
func runCmdChild() error {
	if os.Getenv(modeEnv) == "ignore" {
		signal.Ignore(syscall.SIGHUP, syscall.SIGTERM)
	}
	for {
		writeToken(os.Getenv(idEnv)+"-child", os.Getenv("LEASEGATE_FENCING_TOKEN"))
		time.Sleep(50 * time.Millisecond)
	}
}

var cmdHTTP = &http.Client{Timeout: 2 * time.Second}

// writeToken writes token to the register under the lock's name.
func writeToken(client, token string) {
	q := url.Values{"name": {os.Getenv("LEASEGATE_LOCK_NAME")}, "token": {token}, "client": {client}}
	resp, err := cmdHTTP.Post(os.Getenv(registerEnv)+"/write?"+q.Encode(), "text/plain", nil)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// leasectlProc is a running `leasectl run` holder as the harness sees it.
type leasectlProc struct {
	p  *proc
	op *AcquireOp
	// started is closed when CMD has started (op is granted); ended when
	// every process holding the FIFO has exited; exited when leasectl has.
	started, ended chan struct{}
	cmdPID         int
}

// startLeasectl runs `leasectl run --lock name` with wait as --wait, whose
// CMD ignores SIGHUP and SIGTERM when mode is "ignore", and exits by itself
// after runFor unless it is 0.
func (h *Harness) startLeasectl(name, mode string, runFor, wait time.Duration) (*leasectlProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.leasectlNo++
	id := fmt.Sprintf("leasectl-%d", h.leasectlNo)
	h.mu.Unlock()
	dir := filepath.Join(h.out, "fifo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, id)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("mkfifo %s: %w", path, err)
	}
	// Non-blocking, so the open does not wait for a writer; reads then
	// park in the poller until data arrives or the last writer is gone.
	fifo, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	rid := newRequestID()
	args := []string{"--client-id", id, "--timeout", "2s"}
	for _, u := range h.frontURLs() {
		args = append(args, "--endpoint", u)
	}
	args = append(args, "run", "--lock", name, "--ttl", h.cfg.TTL.String(), "--wait", wait.String(),
		"--request-id", rid, "--", exe, "-test.run=^$")
	env := childEnv(roleEnv+"=cmd", fifoEnv+"="+path, registerEnv+"="+h.Reg.URL(), idEnv+"="+id,
		modeEnv+"="+mode, runForEnv+"="+runFor.String())
	op := h.Hist.begin(&AcquireOp{Client: id, Role: "leasectl", Name: name, RequestID: rid, Wait: wait, Invoke: time.Now()})
	p, err := startProc(id, h.leasectl, args, env, filepath.Join(h.out, "logs", "leasectl.log"), nil)
	if err != nil {
		fifo.Close()
		return nil, err
	}
	lp := &leasectlProc{p: p, op: op, started: make(chan struct{}), ended: make(chan struct{})}
	h.addCloser(lp.kill)
	go lp.follow(h, fifo)
	go func() {
		<-p.exited
		// The acquire ended when leasectl exited, not when the FIFO was
		// given up on below.
		exited := time.Now()
		// leasectl never ran CMD: record how its acquire ended.
		select {
		case <-lp.started:
			return
		case <-time.After(time.Second): // the start line may still be in the FIFO
		}
		select {
		case <-lp.started:
			return
		default:
		}
		code := p.cmd.ProcessState.ExitCode()
		h.Hist.update(func() {
			if op.Complete.IsZero() {
				op.Complete, op.Err = exited, fmt.Sprintf("leasectl exited with status %d (%v) before running CMD", code, p.err)
				switch code {
				case 3:
					op.Outcome = outTimeout
				case -1:
					op.Outcome = outCanceled // killed
				default:
					op.Outcome = outError
				}
			}
		})
	}()
	return lp, nil
}

// follow reads the FIFO: the start line, then end of file.
func (lp *leasectlProc) follow(h *Harness, fifo *os.File) {
	defer fifo.Close()
	defer close(lp.ended)
	r := bufio.NewReader(fifo)
	started := false
	for {
		line, err := r.ReadString('\n')
		if line != "" && !started {
			received := time.Now()
			started = true
			if err := lp.started1(h, strings.TrimSpace(line), received); err != nil {
				h.harnessErr(err)
			}
			close(lp.started)
		}
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) && started {
			end := time.Now()
			h.Hist.update(func() { lp.op.End, lp.op.DoneAt = end, end })
			return
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EAGAIN) {
			h.harnessErr(fmt.Errorf("%s: reading its FIFO: %w", lp.p.name, err))
			return
		}
		// No writer has opened the FIFO yet: CMD has not started.
		select {
		case <-lp.p.exited:
			if !started {
				// One last look: CMD may have started and ended meanwhile.
				if line, _ := r.ReadString('\n'); line != "" {
					continue
				}
				return
			}
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// started1 records CMD's start from its line "start MONO PID TOKEN",
// checking that the reading falls between leasectl's start and the line's
// arrival, as one clock read in two processes must.
func (lp *leasectlProc) started1(h *Harness, line string, received time.Time) error {
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "start" {
		return fmt.Errorf("%s: CMD wrote %q; want \"start MONO PID TOKEN\"", lp.p.name, line)
	}
	mono, err1 := strconv.ParseInt(f[1], 10, 64)
	pid, err2 := strconv.Atoi(f[2])
	token, err3 := strconv.ParseInt(f[3], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("%s: CMD wrote %q: %w", lp.p.name, line, err)
	}
	lp.cmdPID = pid
	at := h.mono.at(mono)
	h.Hist.update(func() {
		lp.op.Complete, lp.op.Outcome, lp.op.Token = at, outGranted, token
	})
	if at.Before(lp.op.Invoke.Add(-h.mono.err)) || at.After(received.Add(h.mono.err)) {
		return fmt.Errorf("%s: CMD's CLOCK_MONOTONIC start maps to %s, outside [%s, %s] (leasectl's start, the line's arrival): the clocks disagree",
			lp.p.name, ts(at), ts(lp.op.Invoke), ts(received))
	}
	return nil
}

// signal sends sig to leasectl alone, not to its process group: what
// happens to CMD is leasectl's doing.
func (lp *leasectlProc) signal(sig syscall.Signal) error {
	if !lp.p.alive() {
		return errors.New(lp.p.name + " has exited")
	}
	return syscall.Kill(lp.p.pid(), sig)
}

// kill ends leasectl, its supervisor and CMD's process group.
func (lp *leasectlProc) kill() {
	lp.p.kill()
	if lp.cmdPID > 0 {
		_ = syscall.Kill(-lp.cmdPID, syscall.SIGKILL)
	}
}

// await waits for ch or the timeout; it reports whether ch closed.
func await(ctx context.Context, ch <-chan struct{}, timeout time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
	case <-time.After(timeout):
	}
	return false
}

// leasectlSignal runs a `leasectl run` holder whose command never ends on
// its own, queues another behind it, and sends leasectl SIGHUP
// (leasectl-hup: the command gets --grace to exit, or SIGKILL) or SIGKILL
// (leasectl-kill: the supervisor kills the command's process group, the
// lock lapses at its TTL). The next holder's command must never run beside
// the first's.
func (n *nemesis) leasectlSignal(ctx context.Context, in *Injection) error {
	h := n.h
	c := n.pickCluster()
	name := h.freshName("leasectl", c.Name)
	in.Clusters = []string{c.Name}
	mode := "exit"
	if n.rng.IntN(2) == 0 {
		mode = "ignore" // the command ignores SIGHUP and SIGTERM
	}
	a, err := h.startLeasectl(name, mode, 0, 10*time.Second)
	if err != nil {
		return err
	}
	defer a.kill()
	if !await(ctx, a.started, 15*time.Second) {
		in.Note = "the first leasectl's command never started"
		return nil
	}
	var aop AcquireOp
	h.Hist.update(func() { aop = *a.op })
	in.Target = fmt.Sprintf("%s (%s, token %d, command %ss SIGHUP)", a.p.name, name, aop.Token, map[string]string{"exit": "obey", "ignore": "ignore"}[mode])
	b, err := h.startLeasectl(name, "exit", 300*time.Millisecond, h.cfg.TTL+10*time.Second)
	if err != nil {
		return err
	}
	defer b.kill()
	for i := 0; i < 60; i++ { // until b waits behind a
		d, err := h.probes.base.Describe(ctx, name)
		if err == nil && d.Waiters > 0 {
			break
		}
		n.sleep(ctx, 50*time.Millisecond)
	}
	n.sleep(ctx, n.between(0, h.cfg.TTL/2))
	sig := syscall.SIGHUP
	if in.Kind == kindLeasectlKill {
		sig = syscall.SIGKILL
	}
	in.Start = time.Now()
	if err := a.signal(sig); err != nil {
		in.Note = "signal: " + err.Error()
		return nil
	}
	if !await(ctx, b.started, h.cfg.TTL+10*time.Second) {
		in.Violation = fmt.Sprintf("%s was not free %s after %v to %s", name, time.Since(in.Start).Round(time.Millisecond), sig, a.p.name)
		return nil
	}
	var bop AcquireOp
	h.Hist.update(func() { bop = *b.op })
	in.Freed = bop.Complete.Sub(in.Start)
	in.Unavailable = in.Freed
	ended := await(ctx, a.ended, 10*time.Second)
	await(ctx, b.ended, 10*time.Second)
	in.Heal = time.Now()
	h.Hist.update(func() { aop = *a.op })
	if !ended {
		in.Violation = fmt.Sprintf("%s's command was still running 10s after %v to leasectl", a.p.name, sig)
		return nil
	}
	in.Note = fmt.Sprintf("command gone %s after %v; next command (token %d) started %s after it",
		aop.DoneAt.Sub(in.Start).Round(time.Millisecond), sig, bop.Token, bop.Complete.Sub(aop.DoneAt).Round(time.Millisecond))
	if bop.Complete.Before(aop.DoneAt) {
		in.Violation = fmt.Sprintf("%s's command (token %d) ran until %s, after %s's command (token %d) started at %s",
			a.p.name, aop.Token, ts(aop.DoneAt), b.p.name, bop.Token, ts(bop.Complete))
	}
	return nil
}
