package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
)

func TestAcquireRenewReleaseDescribe(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	ep := []string{"--endpoint", g.URL, "-o", "json"}
	got := decode(t, runOK(t, append(ep, "acquire", "cli", "--ttl", "5s", "--client-id", "ops")...))
	id, _ := got["lockId"].(string)
	token, _ := got["fencingToken"].(float64)
	if id == "" || token <= 0 || got["shard"] != "main" || got["ttlMs"] != float64(5000) || got["name"] != "cli" {
		t.Fatalf("acquire printed %v; want a lock id, a positive token, shard main, ttl 5000", got)
	}
	tok := fmt.Sprint(int64(token))

	d := decode(t, runOK(t, append(ep, "describe", "cli")...))
	if d["held"] != true || d["fencingToken"] != token || d["holderClientId"] != "ops" || d["shard"] != "main" {
		t.Fatalf("describe printed %v; want held by ops with token %s on shard main", d, tok)
	}
	if rn := decode(t, runOK(t, append(ep, "renew", id, tok)...)); rn["renewed"] != true || rn["ttlMs"] != float64(5000) {
		t.Fatalf("renew printed %v", rn)
	}
	r := run(t, nil, append(ep, "try", "cli")...)
	if r.code != exitNotAcquired || decode(t, r.stdout)["acquired"] != false {
		t.Fatalf("try on a held lock exited %d, printed %q; want %d and acquired false", r.code, r.stdout, exitNotAcquired)
	}
	if rel := decode(t, runOK(t, append(ep, "release", id, tok)...)); rel["released"] != true {
		t.Fatalf("release printed %v", rel)
	}
	if rel := decode(t, runOK(t, append(ep, "release", id, tok)...)); rel["released"] != false {
		t.Fatalf("second release printed %v; want released false", rel)
	}
	r = run(t, nil, append(ep, "renew", id, tok)...)
	if r.code != exitLost || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "lock released") {
		t.Fatalf("renew of a released lock exited %d, stderr %q; want %d and one line saying the lock was released", r.code, r.stderr, exitLost)
	}

	table := runOK(t, "--endpoint", g.URL, "describe", "cli")
	if rows := strings.Split(strings.TrimSpace(table), "\n"); len(rows) != 2 || !strings.HasPrefix(rows[0], "NAME") || !strings.Contains(rows[0], "SHARD") {
		t.Fatalf("table output:\n%s\nwant a header with SHARD and one row", table)
	}
}

func TestErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"unknown flag", nil, []string{"describe", "x", "--bogus"}, exitUsage, "unknown flag: --bogus"},
		{"flag of no command", nil, []string{"watch", "p/", "--interval", "1s"}, exitUsage, "unknown flag: --interval"},
		{"bad output", nil, []string{"-o", "yaml", "describe", "x"}, exitUsage, "--output"},
		{"missing argument", nil, []string{"describe"}, exitUsage, "NAME"},
		{"bad token", nil, []string{"renew", "id", "abc"}, exitUsage, `token "abc"`},
		{"bad duration", nil, []string{"acquire", "x", "--ttl", "soon"}, exitUsage, "--ttl"},
		{"unknown command", nil, []string{"frobnicate"}, exitUsage, "unknown command"},
		{"run without lock", nil, []string{"run", "--", "true"}, exitUsage, "--lock is required"},
		{"bad endpoint", nil, []string{"--endpoint", "localhost:1", "describe", "x"}, exitUsage, "endpoint"},
		{"unreachable", nil, []string{"--endpoint", "http://127.0.0.1:1", "describe", "x"}, exitError, "no gateway available"},
		{"unreachable from env", []string{"LEASEGATE_ENDPOINT=http://127.0.0.1:1"}, []string{"try", "x"}, exitError, "127.0.0.1:1"},
		{"name refused by the gateway", []string{"LEASEGATE_ENDPOINT=" + g.URL}, []string{"describe", "bad\x01name"}, exitUsage, "invalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.env, tc.args...)
			if r.code != tc.code || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, tc.want) ||
				strings.Contains(r.stderr, "Usage") || strings.Contains(r.stderr, "goroutine") {
				t.Fatalf("leasectl %q exited %d with stderr %q; want %d and one line mentioning %q", tc.args, r.code, r.stderr, tc.code, tc.want)
			}
		})
	}
	// The environment supplies the endpoint when no flag does.
	r := run(t, []string{"LEASEGATE_ENDPOINT=http://127.0.0.1:1, " + g.URL}, "-o", "json", "describe", "env")
	if r.code != 0 || decode(t, r.stdout)["name"] != "env" {
		t.Fatalf("describe with LEASEGATE_ENDPOINT exited %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if out := runOK(t, "completion", shell); !strings.Contains(out, "leasectl") {
			t.Fatalf("completion %s printed no script", shell)
		}
	}
}

func TestWatchStreamsChanges(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	c, err := client.New([]string{g.URL}, client.WithClientID("watcher-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	first, err := c.Acquire(ctx, "watched/a", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cmd := command(t, nil, "--endpoint", g.URL, "-o", "json", "watch", "watched/")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := lines(stdout)
	if d := decode(t, nextLine(t, out, "snapshot")); d["from"] != "snapshot" || d["event"] != "held" || d["name"] != "watched/a" || d["fencingToken"] != float64(first.Token()) {
		t.Fatalf("first watch line %v; want the snapshot's holder of watched/a", d)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	d := decode(t, nextLine(t, out, "released line"))
	if d["from"] != "live" || d["event"] != "released" || d["clientId"] != "watcher-test" || d["fencingToken"] != float64(first.Token()) {
		t.Fatalf("watch line after release %v; want released by watcher-test", d)
	}
	resume, _ := d["resumeToken"].(string)
	l, err := c.Acquire(ctx, "watched/b", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	if d := decode(t, nextLine(t, out, "holder line")); d["event"] != "held" || d["name"] != "watched/b" || d["fencingToken"] != float64(l.Token()) {
		t.Fatalf("watch line after acquire %v; want held watched/b with token %d", d, l.Token())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch ended with %v after SIGINT; want exit 0", err)
	}
	// --resume continues after the release: the acquire of watched/b
	// comes again, nothing before it.
	cmd = command(t, nil, "--endpoint", g.URL, "-o", "json", "watch", "watched/", "--resume", resume)
	if stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out = lines(stdout)
	if d := decode(t, nextLine(t, out, "resumed line")); d["from"] != "live" || d["event"] != "held" || d["name"] != "watched/b" {
		t.Fatalf("first resumed line %v; want watched/b held", d)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
}
