//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// When renewals stop (here the only gateway shuts down), CMD gets SIGTERM
// --grace before the lock's conservative deadline and SIGKILL at the
// deadline, so it is gone before the lease can lapse.
func TestRunStopsCommandBeforeDeadline(t *testing.T) {
	// Not parallel: it checks when signals land to within a slack that
	// load beside it would eat.
	g := startGateway(t)
	const ttl, grace = 3 * time.Second, time.Second
	// Trap latency (CMD polls every 10 ms), polling for CMD's death and
	// scheduling on a busy machine.
	const slack = 100 * time.Millisecond
	log := filepath.Join(t.TempDir(), "log")
	script := `trap 'echo "term $(date +%s%N)" >> "$1"' TERM; echo "ready $$"; while :; do sleep 0.01; done`
	cmd := command(t, nil, "--endpoint", g.URL, "--timeout", "1s", "run", "--lock", "deadline",
		"--ttl", ttl.String(), "--grace", grace.String(), "--", "sh", "-c", script, "sh", log)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var pid int
	if _, err := fmt.Sscanf(nextLine(t, lines(stdout), "CMD ready"), "ready %d", &pid); err != nil {
		t.Fatalf("CMD's first line: %v", err)
	}
	// A cancelled context skips the graceful drain: the gateway closes its
	// connections and stops answering at once.
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	_ = g.Server.Shutdown(dead)
	// Every request a gateway confirmed was sent before now, so the lock's
	// deadline is at most stopped + TTL − margin, and the lease lapses no
	// sooner than that deadline.
	stopped := time.Now()
	awaitCond(t, 2*ttl, "CMD to be killed", func() bool { return processGone(pid) })
	killed := time.Now()
	_ = cmd.Wait()
	errText, _ := os.ReadFile(stderr.Name())
	if code := cmd.ProcessState.ExitCode(); code != exitLost {
		t.Errorf("leasectl exited %d; want %d (lock lost). stderr:\n%s", code, exitLost, errText)
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("CMD never got SIGTERM: %v. stderr:\n%s", err, errText)
	}
	ns, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(string(raw)), "term "), 10, 64)
	if err != nil {
		t.Fatalf("CMD's log %q: %v", raw, err)
	}
	termed := time.Unix(0, ns)
	at := func(x time.Time) string { return fmt.Sprintf("stop+%s", x.Sub(stopped).Round(time.Millisecond)) }

	// Without trusting what leasectl reports: the deadline is before
	// stopped + TTL.
	if latest := stopped.Add(ttl - grace + slack); termed.After(latest) {
		t.Errorf("SIGTERM reached CMD at %s; want by %s, --grace before the latest possible deadline", at(termed), at(latest))
	}
	if latest := stopped.Add(ttl); killed.After(latest) {
		t.Errorf("CMD was killed at %s; want by %s, the latest possible deadline", at(killed), at(latest))
	}

	// Against the deadline leasectl read from the SDK (Lock.Expires).
	_, after, ok := strings.Cut(string(errText), "is about to be lost: no gateway has confirmed it, and it expires at ")
	if !ok {
		t.Fatalf("stderr does not report the deadline:\n%s", errText)
	}
	deadline, err := time.Parse(time.RFC3339Nano, strings.Fields(after)[0])
	if err != nil {
		t.Fatalf("reported deadline: %v", err)
	}
	if deadline.After(stopped.Add(ttl)) {
		t.Errorf("reported deadline %s is past the latest possible %s", at(deadline), at(stopped.Add(ttl)))
	}
	if before := deadline.Sub(termed); before < grace-slack || before > grace+slack {
		t.Errorf("SIGTERM reached CMD %s before the deadline; want --grace %s (±%s)", before, grace, slack)
	}
	t.Logf("term %s kill %s deadline %s", at(termed), at(killed), at(deadline))
	if d := killed.Sub(deadline); d < -slack || d > slack {
		t.Errorf("CMD was killed %s after the deadline; want at the deadline (±%s)", d, slack)
	}
}

// A --grace that cannot fit between healthy renewals is refused, and the
// message names the bound.
func TestRunRefusesGraceAboveTTLThird(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	r := run(t, nil, "--endpoint", g.URL, "run", "--lock", "graceful", "--ttl", "3s", "--grace", "2s", "--", "sh", "-c", "echo ran")
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "at most TTL/3 (1s for --ttl 3s)") {
		t.Errorf("run --ttl 3s --grace 2s exited %d, stdout %q, stderr %q; want %d, CMD not run, a message naming the bound 1s",
			r.code, r.stdout, r.stderr, exitUsage)
	}
}
