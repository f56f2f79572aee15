package testbed

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/leasegate/leasegate/internal/embedetcd"
)

// EtcdChildEnv, when set in the environment, makes the loadtest binary (or
// its test binary) serve the pinned setup's etcd member instead of running
// the load test: the value is the member's spec, from StartEtcdProcess.
const EtcdChildEnv = "LEASEGATE_LOADTEST_ETCD_CHILD"

// etcdSpec is what the child is told.
type etcdSpec struct {
	Dir  string `json:"dir"`
	CPUs CPUs   `json:"cpus"`
}

// readyPrefix starts the line the child prints once it serves clients,
// followed by its client URL.
const readyPrefix = "ready "

// RunEtcdChild is the child's side of StartEtcdProcess: it pins every
// thread of this process to the spec's CPUs, serves one single-member etcd
// cluster on 127.0.0.1 (configured as the embedded setup's members are:
// fsync on, etcd's default raft timing), prints "ready <client URL>" on
// out, and serves until in reaches its end (the parent closed it, or
// died), SIGTERM or SIGINT.
func RunEtcdChild(spec string, in io.Reader, out io.Writer) error {
	var s etcdSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return fmt.Errorf("spec %q: %w", spec, err)
	}
	if _, err := PinSelf(s.CPUs); err != nil {
		return err
	}
	srv, err := embedetcd.Start(embedetcd.Config{Name: "shard-0", Dir: s.Dir})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := CheckURL(srv.Endpoint()); err != nil {
		return fmt.Errorf("etcd member: %w", err)
	}
	fmt.Fprintln(out, readyPrefix+srv.Endpoint())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, in); close(eof) }()
	select {
	case <-eof:
	case <-ctx.Done():
	case err := <-srv.Etcd().Err():
		return fmt.Errorf("etcd member: %w", err)
	}
	return nil
}

// EtcdProcess is a single-member etcd cluster in a process of its own,
// pinned to its CPUs, serving clients on 127.0.0.1 only.
type EtcdProcess struct {
	// Endpoint is its client URL.
	Endpoint string

	cmd   *exec.Cmd
	stdin io.WriteCloser
	dir   string
	done  chan struct{}
}

// StartEtcdProcess re-executes this binary as an etcd member (RunEtcdChild)
// pinned to cpus, in a new temporary directory, and waits until it serves
// (60 s at most). Its stderr goes to log. Close stops it.
func StartEtcdProcess(ctx context.Context, cpus CPUs, log io.Writer) (_ *EtcdProcess, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "loadtest-pinned-etcd-")
	if err != nil {
		return nil, err
	}
	spec, err := json.Marshal(etcdSpec{Dir: dir, CPUs: cpus})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), EtcdChildEnv+"="+string(spec))
	cmd.Stderr = log
	cmd.SysProcAttr = childAttr()
	p := &EtcdProcess{cmd: cmd, dir: dir, done: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		p.stdin, err = cmd.StdinPipe()
	}
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the etcd process: %w", err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	t := time.NewTimer(60 * time.Second)
	defer t.Stop()
	select {
	case s := <-line:
		ep, ok := strings.CutPrefix(strings.TrimSpace(s), readyPrefix)
		if !ok {
			return nil, errors.New("the etcd process exited before it served; its errors are above")
		}
		if err := CheckURL(ep); err != nil {
			return nil, fmt.Errorf("the etcd process: %w", err)
		}
		p.Endpoint = ep
		return p, nil
	case <-t.C:
		return nil, errors.New("the etcd process did not serve within 60s")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PID is the process id.
func (p *EtcdProcess) PID() int { return p.cmd.Process.Pid }

// CPU is the process's CPU time so far (user + system, every thread).
func (p *EtcdProcess) CPU() time.Duration { return processCPU(p.PID()) }

// Close stops the member by closing its stdin, kills it if it has not
// stopped within 30 s, and removes its data.
func (p *EtcdProcess) Close() {
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	os.RemoveAll(p.dir)
}
