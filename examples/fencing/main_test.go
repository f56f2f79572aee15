//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasegate/leasegate/fence"
)

// binary is the demo built by TestMain: the demo re-executes
// itself as client A, so it must run as a real program, not in-process.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasegate-fencing-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "fencing")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "go build:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// demoCmd prepares `fencing args…`. At the test's deadline the demo gets
// SIGINT, so that it still cleans up client A, and SIGKILL 10 s later.
func demoCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// submatch returns the first group of re in out, failing the test if absent.
func submatch(t *testing.T, re, out string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output has no match for %s:\n%s", re, out)
	}
	return m[1]
}

// wantGone asserts that process pid no longer exists.
func wantGone(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("client A (pid %d) still exists after the demo ended (kill(pid, 0) = %v)", pid, err)
	}
}

func TestDemoFencing(t *testing.T) {
	dataDir := t.TempDir()
	cmd := demoCmd(t, "--data-dir", dataDir, "--ttl", "2s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	out := stdout.String()
	t.Logf("demo took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("fencing demo = %v; want exit 0\nstderr:\n%s", err, stderr.String())
	}

	tA := submatch(t, `A acquired order:42 with fencing token (\d+) \(TTL 2s\)`, out)
	tB := submatch(t, `B acquired order:42 with fencing token (\d+)`, out)
	a, _ := strconv.ParseInt(tA, 10, 64)
	b, _ := strconv.ParseInt(tB, 10, 64)
	if b <= a {
		t.Fatalf("B's token %d is not above A's %d", b, a)
	}
	for _, want := range []string{
		"A paused with SIGSTOP",
		"A's lease expired: CheckFence(order:42, " + tA + ") = false",
		"B wrote order 42 status=paid-by-B with token " + tB + ": accepted",
		"A resumed with SIGCONT",
		// The rejection comes from A's own output: the store's error.
		`A's write with token ` + tA + ` was rejected: fence: stale token ` + tA + ` for "order:42": highest accepted is ` + tB,
		"order 42 final state: status=paid-by-B token=" + tB,
		"verdict: safe",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?m)^\[ *\d+\.\d{3}s\] `).FindAllString(out, -1) == nil {
		t.Errorf("output lines carry no elapsed times")
	}
	pid, _ := strconv.Atoi(submatch(t, `started client A as process (\d+)`, out))
	wantGone(t, pid)
	if _, err := os.Stat(filepath.Join(dataDir, "shard-0")); err != nil {
		t.Errorf("--data-dir %s holds no etcd data: %v", dataDir, err)
	}
}

// TestDemoInterruptedWhileAPaused interrupts the demo while client A is
// stopped: the demo must kill A, remove its temporary data and fail.
func TestDemoInterruptedWhileAPaused(t *testing.T) {
	cmd := demoCmd(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var out strings.Builder
	for paused := false; !paused; {
		line, ok := <-lines
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("demo ended before pausing A:\n%s\nstderr:\n%s", out.String(), stderr.String())
		}
		out.WriteString(line + "\n")
		paused = strings.Contains(line, "A paused with SIGSTOP")
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for line := range lines {
		out.WriteString(line + "\n")
	}
	err = cmd.Wait()
	t.Logf("output:\n%s\nstderr:\n%s", out.String(), stderr.String())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("interrupted demo = %v; want exit status 1", err)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr lacks %q", "interrupted")
	}
	pid, _ := strconv.Atoi(submatch(t, `started client A as process (\d+)`, out.String()))
	wantGone(t, pid)
	dataDir := submatch(t, `over embedded etcd \(data in (\S+)\)`, out.String())
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary data dir %s left behind: %v", dataDir, err)
	}
}

func TestDemoFencingRejectsBadTTL(t *testing.T) {
	for _, ttl := range []string{"500ms", "1s", "2500ms", "31s"} {
		cmd := demoCmd(t, "--ttl", ttl)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitUsage {
			t.Errorf("fencing --ttl %s = %v; want exit status %d", ttl, err, exitUsage)
		}
		if want := "want whole seconds from 2s to 30s"; !strings.Contains(stderr.String(), want) {
			t.Errorf("fencing --ttl %s said %q; want it to contain %q", ttl, stderr.String(), want)
		}
	}
}

// TestJudge checks that the verdict rests on A's reported outcome and the
// store's final state, and on nothing else.
func TestJudge(t *testing.T) {
	t.Parallel()
	rejected := clientEvent{Event: evWrite, Token: 10, Stale: true, Highest: 11, Error: "fence: stale token 10"}
	final := fence.Order{ID: "42", Status: statusB, Token: 11}
	for _, tc := range []struct {
		desc   string
		tA, tB int64
		w      clientEvent
		final  fence.Order
		safe   bool
	}{
		{"the dance as it should go", 10, 11, rejected, final, true},
		{"A's stale write accepted", 10, 11, clientEvent{Event: evWrite, Token: 10, Accepted: true}, final, false},
		{"A failed for another reason", 10, 11, clientEvent{Event: evWrite, Token: 10, Error: "disk full"}, final, false},
		{"rejection names other tokens", 10, 11, clientEvent{Event: evWrite, Token: 10, Stale: true, Highest: 12}, final, false},
		{"order ends as A wrote it", 10, 11, rejected, fence.Order{ID: "42", Status: statusA, Token: 10}, false},
		{"order ends with B's status and another token", 10, 11, rejected, fence.Order{ID: "42", Status: statusB, Token: 10}, false},
		{"B's token not newer", 11, 11, rejected, final, false},
	} {
		err := judge(tc.tA, tc.tB, tc.w, tc.final)
		if (err == nil) != tc.safe {
			t.Errorf("%s: judge(%d, %d, %+v, %+v) = %v; want safe %v", tc.desc, tc.tA, tc.tB, tc.w, tc.final, err, tc.safe)
		}
	}
}
