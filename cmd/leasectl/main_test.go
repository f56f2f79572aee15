package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
)

var (
	shared   *etcdtest.Cluster
	leasectl string // the binary under test, built once
)

func TestMain(m *testing.M) {
	// A leasectl run inside this test binary re-executes it as CMD's
	// supervisor.
	if len(os.Args) > 1 && os.Args[1] == superviseArg {
		os.Exit(supervise(os.Args[2:]))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "leasectl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	leasectl = filepath.Join(dir, "leasectl")
	if out, err := exec.Command("go", "build", "-o", leasectl, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build leasectl: %v\n%s", err, out)
		return 1
	}
	shared, err = etcdtest.StartIn(filepath.Join(dir, "etcd"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	shared.Stop()
	if code == 0 {
		if err := goleak.Find(etcdtest.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}

// gateway is a gateway running in-process over the shared etcd.
type gateway = gwtest.Gateway

// startGateway starts a gateway under a fresh prefix and stops it at
// cleanup.
func startGateway(t *testing.T, opts ...gwtest.Option) *gateway {
	t.Helper()
	return gwtest.Start(t, shared, opts...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// command prepares a leasectl invocation against g (no environment
// endpoint unless env says so).
func command(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctxT(t), leasectl, args...)
	cmd.Env = append(cleanEnv(), env...)
	return cmd
}

func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEGATE_") {
			out = append(out, kv)
		}
	}
	return out
}

// result is a finished leasectl run.
type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := command(t, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("leasectl %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{stdout.String(), stderr.String(), code}
}

// runOK runs leasectl and fails the test unless it exits 0.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	r := run(t, nil, args...)
	if r.code != 0 {
		t.Fatalf("leasectl %v exited %d: %s", args, r.code, r.stderr)
	}
	return r.stdout
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("output %q is not a JSON object: %v", s, err)
	}
	return m
}

// lines delivers the lines a reader produces.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

func nextLine(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatalf("output ended while waiting for %s", what)
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	return ""
}

// revokeLockLeases revokes the leases of every lock key under g's prefix,
// as etcd would expire them.
func revokeLockLeases(t *testing.T, g *gateway) int {
	t.Helper()
	cli := shared.ClientFor(t)
	resp, err := cli.Get(ctxT(t), g.Prefix+"/locks/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 {
			continue
		}
		if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(kv.Lease)); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}
