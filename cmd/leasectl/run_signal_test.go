//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A stop signal that arrives after the grant but before CMD starts keeps
// CMD from starting: the lock is released and leasectl exits 128+N.
func TestRunStopSignalBeforeStart(t *testing.T) {
	g := startGateway(t)
	ran := filepath.Join(t.TempDir(), "ran")
	testHookGranted = func(sigs <-chan os.Signal) {
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Error(err)
			return
		}
		// Delivery to leasectl's channel is asynchronous: wait until the
		// signal is there, so that it lands inside the window under test.
		awaitCond(t, 5*time.Second, "SIGTERM delivered to leasectl", func() bool { return len(sigs) > 0 })
	}
	t.Cleanup(func() { testHookGranted = nil })

	var stdout, stderr bytes.Buffer
	root := newRootCmd(&stdout)
	root.SetArgs([]string{"--endpoint", g.url, "run", "--lock", "early", "--", "sh", "-c", `touch "$1"`, "sh", ran})
	code := exitCode(root.ExecuteContext(ctxT(t)), &stderr)
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("leasectl run exited %d, stderr %q; want %d", code, stderr.String(), 128+int(syscall.SIGTERM))
	}
	if _, err := os.Stat(ran); err == nil {
		t.Errorf("CMD ran although SIGTERM arrived before it started")
	}
	if !strings.Contains(stderr.String(), "not started") {
		t.Errorf("stderr %q does not say CMD was not started", stderr.String())
	}
	if d := decode(t, runOK(t, "--endpoint", g.url, "-o", "json", "describe", "early")); d["held"] != false {
		t.Errorf("lock still held after leasectl run gave up: %v", d)
	}
}

// awaitCond polls cond until it holds, failing the test after within.
func awaitCond(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A stop signal during the wait ends it; CMD never runs and leasectl exits
// 128+N.
func TestRunStopSignalWhileWaiting(t *testing.T) {
	g := startGateway(t)
	held := decode(t, runOK(t, "--endpoint", g.url, "-o", "json", "try", "queued", "--ttl", "10s"))
	cmd := command(t, nil, "--endpoint", g.url, "run", "--lock", "queued", "--", "sh", "-c", "echo ran")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 10*time.Second, "leasectl run to queue", func() bool {
		return decode(t, runOK(t, "--endpoint", g.url, "-o", "json", "describe", "queued"))["waiters"] == float64(1)
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGINT) || stdout.Len() != 0 {
		t.Errorf("leasectl run interrupted while waiting exited %d, stdout %q, stderr %q; want %d and CMD not run",
			code, stdout.String(), stderr.String(), 128+int(syscall.SIGINT))
	}
	runOK(t, "--endpoint", g.url, "release", held["lockId"].(string), fmt.Sprint(int64(held["fencingToken"].(float64))))
}
