package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/queue"
)

// hostile is text that would forge a row, shift a column and drive the
// operator's terminal (clear it, set its title, colour it, reverse it)
// if it were printed raw.
const hostile = "evil\nlock  0  forged-row\t|\x1b[2J\x1b]0;owned\x07\u009b31m\u202egnp.exe\x7f"

// ownerHeader is the first line of a waiter value the gateway wrote, the
// one that proves the key's owner: raw keys carry it as the engine's do.
func ownerHeader(t *testing.T, cli *clientv3.Client, g *gateway) string {
	t.Helper()
	c, err := client.New([]string{g.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctxT(t), "header")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctxT(t))
	resp, err := cli.Get(ctxT(t), queue.NamePrefix(g.Prefix, "header"), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the gateway's waiter key: %v, %d keys", err, len(resp.Kvs))
	}
	header, _, ok := strings.Cut(string(resp.Kvs[0].Value), "\n")
	if !ok {
		t.Fatalf("waiter value %q has no header line", resp.Kvs[0].Value)
	}
	return header + "\n"
}

// rawWaiter writes a waiter key under g's prefix as an engine would, with
// the owner header header and client id clientID: what a gateway that did
// not check client ids stored, or whoever can write etcd.
func rawWaiter(t *testing.T, cli *clientv3.Client, g *gateway, header, name, waiter, clientID string) {
	t.Helper()
	lease, err := cli.Grant(ctxT(t), 60)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(map[string]any{"c": clientID, "t": 60, "e": 0, "s": "", "q": time.Now().UnixMilli()})
	key := queue.NamePrefix(g.Prefix, name) + queue.WaiterID(waiter)
	if _, err := cli.Put(ctxT(t), key, header+string(meta), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
}

// terminalSafe reports the first character of out a terminal would act
// on: any control character but the newline that ends a row, and any
// other character that is not printable.
func terminalSafe(out string) error {
	for i, r := range out {
		if r != '\n' && (!unicode.IsPrint(r) || r == unicode.ReplacementChar) {
			return fmt.Errorf("%U at byte %d of %q", r, i, out)
		}
	}
	return nil
}

// Text other clients stored — client ids, an election's value, audit
// actors and reasons — reaches the operator's terminal escaped, through
// every table and line leasectl prints (ls, queue, describe, watch,
// audit, leader), in table and JSON output alike, and each record is one
// row: the hostile text forges none.
func TestUntrustedTextNeverReachesTheTerminalRaw(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	cli := shared.ClientFor(t)
	header := ownerHeader(t, cli, g)
	rawWaiter(t, cli, g, header, "inj/a", "1", hostile)
	rawWaiter(t, cli, g, header, "inj/a", "2", hostile)
	rec, _ := json.Marshal(queue.AuditRecord{ID: fmt.Sprintf("%020d-0000", time.Now().UnixNano()), Action: "force_release" + hostile,
		Name: "inj/a", Actor: hostile, Reason: hostile, At: time.Now(), EvictedToken: 7, EvictedClientID: hostile})
	if _, err := cli.Put(ctxT(t), g.Prefix+"/audit/"+fmt.Sprintf("%020d-0000", time.Now().UnixNano()), string(rec)); err != nil {
		t.Fatal(err)
	}
	c, err := client.New([]string{g.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lead, err := c.Election("inj/e").Campaign(ctxT(t), []byte(hostile), client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Resign(context.Background())

	ep := []string{"--endpoint", g.URL}
	for _, tc := range []struct {
		args []string
		rows int // table rows after the header
	}{
		{[]string{"ls", "inj/"}, 2},
		{[]string{"queue", "inj/a"}, 2},
		{[]string{"describe", "inj/a"}, 1},
		{[]string{"audit"}, 1},
		{[]string{"leader", "inj/e"}, 1},
	} {
		for _, output := range []string{"table", "json"} {
			out := runOK(t, append(append(ep, "-o", output), tc.args...)...)
			if err := terminalSafe(out); err != nil {
				t.Errorf("leasectl %v -o %s prints %v", tc.args, output, err)
			}
			rows := tc.rows
			if output == "table" {
				rows++ // the header
			}
			if n := strings.Count(out, "\n"); n != rows {
				t.Errorf("leasectl %v -o %s printed %d lines; want %d:\n%s", tc.args, output, n, rows, out)
			}
			if output == "json" {
				carried := false
				for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
					carried = carried || strings.Contains(fmt.Sprint(decode(t, l)), "\x1b[2J")
				}
				if !carried {
					t.Errorf("leasectl %v -o json: no line carries the text as stored:\n%s", tc.args, out)
				}
			}
		}
	}

	// watch: its snapshot rows, then a live one.
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	cmd := exec.CommandContext(ctx, leasectl, append(ep, "watch", "inj/")...)
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	ch := lines(stdout)
	var got []string
	for range 4 { // the header, the election's leader, the lock's two keys
		got = append(got, nextLine(t, ch, "a watch row"))
	}
	rawWaiter(t, cli, g, header, "inj/a", "3", hostile)
	got = append(got, nextLine(t, ch, "the live row"))
	out := strings.Join(got, "\n") + "\n"
	if err := terminalSafe(out); err != nil {
		t.Errorf("leasectl watch prints %v", err)
	}
	if !strings.Contains(got[len(got)-1], "queued") || !strings.Contains(got[len(got)-1], `\x1b[2J`) {
		t.Errorf("the live row %q is not the queued key, escaped", got[len(got)-1])
	}
}
