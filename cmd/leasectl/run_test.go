package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Concurrent `leasectl run` on one lock never overlap, and each later
// holder sees a higher fencing token.
func TestRunConcurrentNeverOverlap(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "start $LEASEGATE_FENCING_TOKEN $LEASEGATE_LOCK_NAME ${#LEASEGATE_LOCK_ID}" >> "$1"; sleep 0.2; echo "end $LEASEGATE_FENCING_TOKEN" >> "$1"`
	const n = 3
	var stderr [n]bytes.Buffer
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		cmd := command(t, nil, "--endpoint", g.URL, "run", "--lock", "job", "--ttl", "5s", "--wait", "30s", "--", "sh", "-c", script, "sh", log)
		cmd.Stderr = &stderr[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { errs <- cmd.Wait() }()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("leasectl run: %v; stderr: %s %s %s", err, stderr[0].String(), stderr[1].String(), stderr[2].String())
		}
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(got) != 2*n {
		t.Fatalf("log has %d lines; want %d:\n%s", len(got), 2*n, raw)
	}
	var prev int64
	for i := 0; i < n; i++ {
		start, end := strings.Fields(got[2*i]), strings.Fields(got[2*i+1])
		if len(start) != 4 || start[0] != "start" || len(end) != 2 || end[0] != "end" || start[1] != end[1] {
			t.Fatalf("critical sections interleave or are malformed:\n%s", raw)
		}
		token, err := strconv.ParseInt(start[1], 10, 64)
		if err != nil || token <= prev {
			t.Fatalf("token %q after %d; want strictly increasing:\n%s", start[1], prev, raw)
		}
		if start[2] != "job" || start[3] == "0" {
			t.Fatalf("environment: LEASEGATE_LOCK_NAME %q, LEASEGATE_LOCK_ID length %s; want job and non-empty", start[2], start[3])
		}
		prev = token
	}
	if d := decode(t, runOK(t, "--endpoint", g.URL, "-o", "json", "describe", "job")); d["held"] != false {
		t.Fatalf("lock still held after every run exited: %v", d)
	}
}

// processGone reports whether pid no longer runs (gone or a zombie).
func processGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// A proven loss (the lease revoked through etcd, as if it had expired)
// kills CMD at once, without --grace: another holder may already run. CMD
// here ignores SIGTERM, which makes no difference. leasectl exits non-zero
// saying the lock was lost.
func TestRunKillsCommandOnLeaseLoss(t *testing.T) {
	// Not parallel: it bounds how soon the loss is acted on, to within a
	// renewal interval that load beside it would stretch.
	g := startGateway(t)
	const ttl, grace = 3 * time.Second, 1 * time.Second
	cmd := command(t, nil, "--endpoint", g.URL, "run", "--lock", "doomed", "--ttl", ttl.String(), "--grace", grace.String(),
		"--", "sh", "-c", `trap "" TERM; sleep 60 & echo "ready $!"; wait`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := lines(stdout)
	ready := strings.Fields(nextLine(t, out, "CMD ready"))
	sleepPID, err := strconv.Atoi(ready[len(ready)-1])
	if err != nil {
		t.Fatalf("CMD printed %q", ready)
	}
	if n := revokeLockLeases(t, g); n != 1 {
		t.Fatalf("revoked %d leases; want 1", n)
	}
	revoked := time.Now()
	err = cmd.Wait()
	elapsed := time.Since(revoked)
	code := cmd.ProcessState.ExitCode()
	if err == nil || code != exitLost {
		t.Fatalf("leasectl exited %d (%v); want %d. stderr:\n%s", code, err, exitLost, stderr.String())
	}
	if !strings.Contains(stderr.String(), `lock "doomed" was lost`) || strings.Contains(stderr.String(), "SIGTERM") {
		t.Fatalf("stderr does not say the lock was lost, or says CMD got SIGTERM:\n%s", stderr.String())
	}
	if !processGone(sleepPID) {
		t.Fatalf("CMD's child %d still runs after leasectl exited", sleepPID)
	}
	// Loss is noticed at the next renewal (≤ TTL/3 + 10%), then CMD is
	// killed at once: well before the grace period would have ended.
	if limit := ttl*11/30 + grace/2; elapsed > limit {
		t.Fatalf("leasectl exited %s after the lease was revoked; want within %s, the renewal interval, and without --grace", elapsed, limit)
	}
}

func TestRunExitsWithCommandStatusAndReleases(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	r := run(t, nil, "--endpoint", g.URL, "run", "--lock", "status", "--", "sh", "-c", "exit 7")
	if r.code != 7 || r.stderr != "" {
		t.Fatalf("run of `exit 7` exited %d, stderr %q; want 7 and nothing", r.code, r.stderr)
	}
	if d := decode(t, runOK(t, "--endpoint", g.URL, "-o", "json", "describe", "status")); d["held"] != false {
		t.Fatalf("lock still held after run exited: %v", d)
	}
	r = run(t, nil, "--endpoint", g.URL, "run", "--lock", "status", "--", "/nonexistent/cmd")
	if r.code != 127 || !strings.Contains(r.stderr, "start /nonexistent/cmd") {
		t.Fatalf("run of a missing command exited %d, stderr %q; want 127 and a start error", r.code, r.stderr)
	}
	if d := decode(t, runOK(t, "--endpoint", g.URL, "-o", "json", "describe", "status")); d["held"] != false {
		t.Fatalf("lock still held after CMD failed to start: %v", d)
	}
}

func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	cmd := command(t, nil, "--endpoint", g.URL, "run", "--lock", "signals", "--",
		"sh", "-c", `trap 'echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := lines(stdout)
	if l := nextLine(t, out, "ready"); l != "ready" {
		t.Fatalf("CMD printed %q; want ready", l)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if l := nextLine(t, out, "got-term"); l != "got-term" {
		t.Fatalf("CMD printed %q; want got-term", l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("leasectl exited with %v; want CMD's status 0", err)
	}
	if d := decode(t, runOK(t, "--endpoint", g.URL, "-o", "json", "describe", "signals")); d["held"] != false {
		t.Fatalf("lock still held after a forwarded SIGTERM: %v", d)
	}
}

func TestRunWaitTimeout(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	held := decode(t, runOK(t, "--endpoint", g.URL, "-o", "json", "try", "busy", "--ttl", "10s"))
	r := run(t, nil, "--endpoint", g.URL, "run", "--lock", "busy", "--wait", "200ms", "--quiet", "--", "sh", "-c", "echo ran")
	if r.code != exitNotAcquired || strings.Contains(r.stdout, "ran") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("run --quiet on a held lock with --wait exited %d, stdout %q, stderr %q; want %d, CMD not run, one line",
			r.code, r.stdout, r.stderr, exitNotAcquired)
	}
	// Without --quiet, the queue position comes first.
	r = run(t, nil, "--endpoint", g.URL, "run", "--lock", "busy", "--wait", "200ms", "--", "sh", "-c", "echo ran")
	if got := strings.Split(r.stderr, "\n"); r.code != exitNotAcquired || len(got) != 3 || !strings.HasPrefix(got[0], `leasectl: waiting for "busy": position 1, `) {
		t.Fatalf("run on a held lock with --wait exited %d, stderr %q; want %d, the position, then the error", r.code, r.stderr, exitNotAcquired)
	}
	runOK(t, "--endpoint", g.URL, "release", held["lockId"].(string), fmt.Sprint(int64(held["fencingToken"].(float64))))
}

func TestGraceFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ttl, grace time.Duration
		set        bool
		want       time.Duration
		wantErr    string
	}{
		{ttl: 30 * time.Second, want: 10 * time.Second},
		{ttl: time.Minute, want: 10 * time.Second},
		{ttl: 3 * time.Second, want: time.Second},
		{ttl: 30 * time.Second, grace: 10 * time.Second, set: true, want: 10 * time.Second},
		{ttl: 30 * time.Second, grace: 0, set: true, want: 0},
		{ttl: 30 * time.Second, grace: 11 * time.Second, set: true, wantErr: "at most TTL/3 (10s for --ttl 30s)"},
		{ttl: 3 * time.Second, grace: 2 * time.Second, set: true, wantErr: "at most TTL/3 (1s for --ttl 3s)"},
		{ttl: 3 * time.Second, grace: -time.Second, set: true, wantErr: "want 0 or a positive duration"},
	} {
		got, err := graceFor(tc.ttl, tc.grace, tc.set)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("graceFor(%s, %s, %t) = %s, %v; want an error containing %q", tc.ttl, tc.grace, tc.set, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("graceFor(%s, %s, %t) = %s, %v; want %s", tc.ttl, tc.grace, tc.set, got, err, tc.want)
		}
	}
}
