package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/gwtest"
)

func TestLsQueueForceReleaseAudit(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	ep := []string{"--endpoint", g.URL, "-o", "json"}
	c, err := client.New([]string{g.URL}, client.WithClientID("worker"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var held []*client.Lock
	defer func() {
		for _, l := range held {
			_ = l.Release(ctx)
		}
	}()
	for i := range 5 {
		l, err := c.Acquire(ctx, fmt.Sprintf("jobs/%d", i), client.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	other, err := c.Acquire(ctx, "other", client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, other)
	// ls walks every page: 5 names under jobs/ with page size 2.
	rows := strings.Split(strings.TrimSpace(runOK(t, append(ep, "ls", "jobs/", "--page-size", "2")...)), "\n")
	if len(rows) != 5 {
		t.Fatalf("ls printed %d lines; want 5:\n%s", len(rows), strings.Join(rows, "\n"))
	}
	for i, r := range rows {
		d := decode(t, r)
		if d["name"] != fmt.Sprintf("jobs/%d", i) || d["holderClientId"] != "worker" || d["fencingToken"] != float64(held[i].Token()) || d["shard"] != "main" || d["shardBreaker"] != "closed" {
			t.Fatalf("ls line %d: %v", i, d)
		}
	}
	if n := len(strings.Split(strings.TrimSpace(runOK(t, append(ep, "ls", "--limit", "3")...)), "\n")); n != 3 {
		t.Fatalf("ls --limit 3 printed %d lines", n)
	}

	// queue: the holder, then a waiter.
	wc, err := client.New([]string{g.URL}, client.WithClientID("next-in-line"))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	granted := make(chan *client.Lock, 1)
	go func() {
		l, err := wc.Acquire(ctx, "jobs/0", client.WithTTL(30*time.Second))
		if err == nil {
			granted <- l
		}
		close(granted)
	}()
	var q []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		q = strings.Split(strings.TrimSpace(runOK(t, append(ep, "queue", "jobs/0")...)), "\n")
		if len(q) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the CLI's output: no event to await
	}
	if len(q) != 2 {
		t.Fatalf("queue printed %q; want the holder and one waiter", q)
	}
	if h, w := decode(t, q[0]), decode(t, q[1]); h["position"] != float64(0) || h["holder"] != true || h["clientId"] != "worker" ||
		w["position"] != float64(1) || w["clientId"] != "next-in-line" || w["fencingToken"] != float64(0) {
		t.Fatalf("queue printed %v, %v", h, w)
	}
	table := runOK(t, "--endpoint", g.URL, "queue", "jobs/0")
	if !strings.HasPrefix(table, "POS") || strings.Contains(table, held[0].ID()) {
		t.Fatalf("queue table:\n%s", table)
	}

	// force-release needs a reason, evicts the holder, and is audited.
	if r := run(t, nil, append(ep, "force-release", "jobs/0")...); r.code != exitUsage || !strings.Contains(r.stderr, "--reason") {
		t.Fatalf("force-release without a reason exited %d: %s", r.code, r.stderr)
	}
	fr := decode(t, runOK(t, append(ep, "force-release", "jobs/0", "--reason", "stuck in GC")...))
	if fr["released"] != true || fr["evictedFencingToken"] != float64(held[0].Token()) || fr["evictedClientId"] != "worker" || fr["auditId"] == "" {
		t.Fatalf("force-release printed %v", fr)
	}
	select {
	case l := <-granted:
		if l == nil || l.Token() <= held[0].Token() {
			t.Fatalf("next waiter got %v", l)
		}
		held = append(held, l)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not granted after the eviction")
	}
	if r := run(t, nil, append(ep, "force-release", "jobs/1", "--reason", "x", "--fencing-token", "1")...); r.code != exitError {
		t.Fatalf("force-release of another token exited %d: %s", r.code, r.stderr)
	}
	fr = decode(t, runOK(t, append(ep, "force-release", "free/name", "--reason", "x")...))
	if fr["released"] != false {
		t.Fatalf("force-release of a free name printed %v", fr)
	}
	a := decode(t, strings.TrimSpace(runOK(t, append(ep, "audit")...)))
	if a["name"] != "jobs/0" || a["reason"] != "stuck in GC" || a["evictedFencingToken"] != float64(held[0].Token()) || !strings.HasPrefix(a["actor"].(string), "none/loopback/") {
		t.Fatalf("audit printed %v", a)
	}
}

func TestForceReleaseRefusedWithoutAdminRole(t *testing.T) {
	t.Parallel()
	const token = "plain-user-token-0123456789"
	g := startGateway(t, gwtest.Tokens(token+" acme app"))
	env := []string{"LEASEGATE_TOKEN=" + token}
	for _, args := range [][]string{{"force-release", "x", "--reason", "r", "--fencing-token", "5"}, {"audit"}} {
		r := run(t, env, append([]string{"--endpoint", g.URL}, args...)...)
		if r.code != exitRefused {
			t.Fatalf("leasectl %v as a non-admin exited %d: %s; want %d", args, r.code, r.stderr, exitRefused)
		}
	}
}

// A watch whose gateway stops goes on through another gateway of the
// fleet from where it was: nothing repeated, nothing lost.
func TestWatchSurvivesItsGatewayStopping(t *testing.T) {
	t.Parallel()
	g1 := startGateway(t)
	g2 := startGateway(t, gwtest.Prefix(g1.Prefix))
	c, err := client.New([]string{g2.URL}, client.WithClientID("w"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	cmd := command(t, nil, "--endpoint", g1.URL, "--endpoint", g2.URL, "-o", "json", "watch", "sv/")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	out := lines(stdout)
	a, err := c.Acquire(ctx, "sv/a", client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Release(ctx) }()
	if d := decode(t, nextLine(t, out, "a held")); d["event"] != "held" || d["name"] != "sv/a" {
		t.Fatalf("first line %v; want sv/a held", d)
	}
	g1.Stop()
	b, err := c.Acquire(ctx, "sv/b", client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Release(ctx) }()
	if d := decode(t, nextLine(t, out, "b held")); d["event"] != "held" || d["name"] != "sv/b" || d["from"] != "live" {
		t.Fatalf("line after the gateway stopped %v; want sv/b held, live, and no repeat of sv/a", d)
	}
}

// A semaphore's holders are all listed, with their lease expiries, and the
// table's rows line up with each other and with the header.
func TestLsAndQueueTablesShowEverySemaphoreHolderAligned(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	ctx := context.Background()
	var held []*client.Lock
	defer func() {
		for _, l := range held {
			_ = l.Release(ctx)
		}
	}()
	for _, who := range []string{"a", "a-much-longer-client-id"} {
		c, err := client.New([]string{g.URL}, client.WithClientID(who))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := c.Acquire(ctx, "pool/gpu", client.WithTTL(30*time.Second), client.WithLimit(2))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	ls := decode(t, strings.TrimSpace(runOK(t, "--endpoint", g.URL, "-o", "json", "ls", "pool/")))
	if ls["limit"] != float64(2) || ls["held"] != float64(2) {
		t.Fatalf("ls: %v; want limit 2, held 2", ls)
	}
	out := strings.Split(strings.TrimRight(runOK(t, "--endpoint", g.URL, "queue", "pool/gpu"), "\n"), "\n")
	if len(out) != 3 {
		t.Fatalf("queue printed %d lines; want a header and 2 holders:\n%s", len(out), strings.Join(out, "\n"))
	}
	col := func(line, word string) int { return strings.Index(line, word) }
	header := out[0]
	for _, row := range out[1:] {
		// Every row's HOLDER column starts where the header's does, and
		// both holders show a lease expiry, not "-".
		fields := strings.Fields(row)
		if len(fields) < 6 || fields[2] != "true" {
			t.Fatalf("queue row %q: want a holder", row)
		}
		if at := strings.Index(row, " true "); at+1 != col(header, "HOLDER") {
			t.Errorf("queue row %q: HOLDER at %d, header's at %d\n%s", row, at+1, col(header, "HOLDER"), strings.Join(out, "\n"))
		}
		if fields[5] == "-" {
			t.Errorf("queue row %q: no lease expiry for a holder", row)
		}
	}
}
