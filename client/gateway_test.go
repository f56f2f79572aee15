package client_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Bounds on the example gateway's start and stop: they turn a hang into a
// failure and synchronise nothing.
const (
	gatewayStartTimeout = 2 * time.Minute // includes building the server
	gatewayStopTimeout  = 20 * time.Second
)

// exampleURL is the gateway TestMain started for the runnable examples.
var exampleURL string

// TestMain runs the examples against a real gateway: the leasegate server
// of the repository around this module, built and run as a process over
// its embedded etcd. The SDK's module does not require the server's, so it
// cannot start one in-process; the SDK's other tests, which do, live in the
// root module (internal/sdktest).
func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	g, err := startServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "client: a gateway for the examples:", err)
		return 1
	}
	exampleURL = g.url
	code := m.Run()
	if err := g.stop(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "client: stop the examples' gateway:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "client: goroutine leak:", err)
			code = 1
		}
	}
	return code
}

// server is a leasegate process serving the examples.
type server struct {
	url    string
	cmd    *exec.Cmd
	dir    string
	exited chan struct{} // closed once the process is reaped
	err    error         // the process's exit, set before exited closes
	log    *bytes.Buffer // its stderr, for failure reports
}

// startServer builds cmd/leasegate from the enclosing repository and
// starts it with one embedded etcd cluster on a free loopback port. It
// returns once the server logged that it serves.
func startServer() (_ *server, err error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return nil, err
	}
	if mod, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.HasPrefix(mod, []byte("module github.com/leasegate/leasegate\n")) {
		return nil, fmt.Errorf("%s is not the leasegate repository (go.mod: %v): the examples run only in a checkout", root, err)
	}
	dir, err := os.MkdirTemp("", "leasegate-client-examples-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	bin := filepath.Join(dir, "leasegate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/leasegate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/leasegate: %v\n%s", err, out)
	}

	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--shards", "1", "--data-dir", filepath.Join(dir, "data"), "--log-level", "info")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEGATE_") { // the server reads its flags from them
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, dir: dir, exited: make(chan struct{}), log: &bytes.Buffer{}}
	addr := make(chan string, 1)
	go s.read(stderr, addr)

	timer := time.NewTimer(gatewayStartTimeout)
	defer timer.Stop()
	select {
	case a := <-addr:
		s.url = "http://" + a
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("leasegate exited before serving (%v):\n%s", s.err, s.log)
	case <-timer.C:
	}
	_ = cmd.Process.Kill()
	<-s.exited // the log is complete, and no longer written
	return nil, fmt.Errorf("leasegate did not serve within %s:\n%s", gatewayStartTimeout, s.log)
}

// read keeps the server's log and sends the address from its "leasegate
// serving" line on addr; then it reaps the process, after the last read of
// the pipe as exec requires.
func (s *server) read(stderr io.Reader, addr chan<- string) {
	defer func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	sc := bufio.NewScanner(stderr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		s.log.Write(sc.Bytes())
		s.log.WriteByte('\n')
		var line struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "leasegate serving" && line.Addr != "" {
			select {
			case addr <- line.Addr:
			default:
			}
		}
	}
	_, _ = io.Copy(io.Discard, stderr)
}

// stop ends the server with SIGTERM (SIGKILL past gatewayStopTimeout) and
// removes its data.
func (s *server) stop() error {
	defer os.RemoveAll(s.dir)
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	timer := time.NewTimer(gatewayStopTimeout)
	defer timer.Stop()
	select {
	case <-s.exited:
		return s.err
	case <-timer.C:
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("leasegate still running %s after SIGTERM; killed it", gatewayStopTimeout)
	}
}
