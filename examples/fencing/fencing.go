package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/fence"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Bounds of the demo's --ttl. etcd's shortest lease, with its default
// election timeout of 1 s, is 1.5 s and leases count whole seconds, so a
// 1 s lease would silently live 2 s; longer TTLs only make the demo slower.
const (
	minDemoTTL = 2 * time.Second
	maxDemoTTL = 30 * time.Second
)

// The order both clients write, and what each writes into it.
const (
	demoOrderID = "42"
	statusA     = "paid-by-A"
	statusB     = "paid-by-B"
)

// Bounds on the demo's waits. Expiry is bounded separately, by TTL + 5 s.
const (
	childStartTimeout = 15 * time.Second // A starts, opens the store and acquires
	childWriteTimeout = 10 * time.Second // A resumes and writes
	childExitTimeout  = 5 * time.Second  // A exits after its write
	rpcTimeout        = 10 * time.Second // one call to the gateway
	expiryPoll        = 50 * time.Millisecond
)

// fencingDemoConfig configures the fencing demo.
type fencingDemoConfig struct {
	// DataDir holds the embedded etcd's data. Empty: a temporary directory,
	// removed when the demo ends.
	DataDir string
	// TTL is both clients' lease TTL: whole seconds from minDemoTTL to
	// maxDemoTTL. Default 2 s.
	TTL time.Duration
	// Executable is this program's binary, run as client A. Required.
	Executable string
}

// defaultFencingDemoConfig returns the demo's defaults, Executable unset.
func defaultFencingDemoConfig() fencingDemoConfig {
	return fencingDemoConfig{TTL: 2 * time.Second}
}

// Validate reports the first invalid field, naming the value and what is
// allowed.
func (c fencingDemoConfig) Validate() error {
	if c.TTL < minDemoTTL || c.TTL > maxDemoTTL || c.TTL%time.Second != 0 {
		return fmt.Errorf("--ttl %s: want whole seconds from %s to %s", c.TTL, minDemoTTL, maxDemoTTL)
	}
	if c.Executable == "" {
		return errors.New("the binary to run as client A is unknown")
	}
	return nil
}

// lockOf is the lock name whose tokens fence an order: fence.Orders fences
// order id under "order:" + id, and the tokens must come from that lock.
func lockOf(orderID string) string { return "order:" + orderID }

// runFencingDemo plays the fencing dance (see fence.Orders) and narrates it
// to out. It returns nil only if the store refused A's stale write and the
// order ends as B wrote it. Every process and directory it makes is gone
// when it returns.
func runFencingDemo(ctx context.Context, cfg fencingDemoConfig, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	n := newNarrator(out)
	lock := lockOf(demoOrderID)

	dataDir := cfg.DataDir
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "leasegate-demo-etcd-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dataDir = tmp
	}
	scratch, err := os.MkdirTemp("", "leasegate-demo-orders-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	dbPath := filepath.Join(scratch, "orders.db")

	scfg := server.DefaultConfig()
	scfg.Listen = "127.0.0.1:0"
	scfg.DataDir = dataDir
	scfg.EmbeddedShards = 1
	srv, err := server.Start(ctx, scfg)
	if err != nil {
		return fmt.Errorf("start the gateway: %w", err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	n.say("gateway serving on %s over embedded etcd (data in %s)", srv.URL(), dataDir)

	db, orders, err := openOrders(ctx, dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	n.say("orders store ready: SQLite %s; every write goes through fence.SQLGuard", dbPath)

	lc, hc := newLockClient(srv.URL())
	defer hc.CloseIdleConnections()

	// Client A is a real process, so that pausing it is a real SIGSTOP.
	a, err := startChild(cfg.Executable, "fencing-client",
		"--endpoint", srv.URL(), "--order", demoOrderID, "--db", dbPath, "--ttl", cfg.TTL.String())
	if err != nil {
		return err
	}
	defer a.stop()
	n.say("started client A as process %d", a.pid())
	onOther := func(ev clientEvent) { narrateOther(n, ev) }

	acq, err := a.await(ctx, evAcquired, childStartTimeout, onOther)
	if err != nil {
		return err
	}
	tA, ttl := acq.Token, time.Duration(acq.TTLMs)*time.Millisecond
	n.say("A acquired %s with fencing token %d (TTL %s); it renews every %s and is about to write", lock, tA, ttl, (ttl / 3).Round(time.Millisecond))

	if err := a.pause(); err != nil {
		return err
	}
	n.say("A paused with SIGSTOP (think GC pause): its renewals stop, and it still believes it holds %s", lock)

	if err := awaitExpiry(ctx, lc, lock, tA, ttl+5*time.Second); err != nil {
		return err
	}
	n.say("A's lease expired: CheckFence(%s, %d) = false; the gateway keeps %s from everyone for A's TTL more, while A may still believe it holds", lock, tA, lock)

	gB, err := acquireWaiting(ctx, lc, lock, cfg.TTL, "client-B", ttl+5*time.Second)
	if err != nil {
		return fmt.Errorf("client B: %w", err)
	}
	tB := gB.FencingToken
	n.say("B acquired %s with fencing token %d (A, paused, still believes it holds it: only the token stops A now)", lock, tB)
	if err := orders.Put(ctx, demoOrderID, statusB, tB); err != nil {
		return fmt.Errorf("client B's write with token %d: %w", tB, err)
	}
	n.say("B wrote order %s status=%s with token %d: accepted; the store's highest token for %s is %d", demoOrderID, statusB, tB, lock, tB)

	if err := a.resume(); err != nil {
		return err
	}
	if err := a.send("go"); err != nil {
		return err
	}
	n.say("A resumed with SIGCONT; still believing it holds %s, it writes status=%s with token %d", lock, statusA, tA)
	w, err := a.await(ctx, evWrite, childWriteTimeout, onOther)
	if err != nil {
		return err
	}
	switch {
	case w.Accepted:
		n.say("A's write with token %d was ACCEPTED: the stale holder overwrote the order", w.Token)
	case w.Stale:
		n.say("A's write with token %d was rejected: %s", w.Token, w.Error)
	default:
		n.say("A's write with token %d failed: %s", w.Token, w.Error)
	}
	exitErr := a.finish(childExitTimeout, onOther)

	if err := releaseLock(ctx, lc, gB); err != nil {
		return fmt.Errorf("client B: %w", err)
	}
	n.say("B released %s", lock)
	final, err := orders.Get(ctx, demoOrderID)
	if err != nil {
		return err
	}
	n.say("order %s final state: status=%s token=%d", final.ID, final.Status, final.Token)

	if err := judge(tA, tB, w, final); err != nil {
		n.say("verdict: UNSAFE: %v", err)
		return err
	}
	if exitErr != nil {
		return fmt.Errorf("client A did not exit cleanly: %w", exitErr)
	}
	n.say("verdict: safe: the store refused A's stale token %d because it had accepted %d, and the order is B's", tA, tB)
	return nil
}

// narrateOther tells events of A that arrive while the demo waits for
// another one.
func narrateOther(n *narrator, ev clientEvent) {
	switch ev.Event {
	case evRenewFailed:
		n.say("A's renewal loop, resumed too, finds the lease gone: %s", ev.Error)
	default:
		n.say("A reported %s: %s", ev.Event, ev.Error)
	}
}

// judge decides the demo from what A reported about its write and what the
// store holds at the end: safe only if A, holding tA, was refused because the
// store had accepted B's tB > tA, and the order is B's.
func judge(tA, tB int64, w clientEvent, final fence.Order) error {
	switch {
	case tB <= tA:
		return fmt.Errorf("B's token %d is not above A's %d", tB, tA)
	case w.Accepted:
		return fmt.Errorf("A's stale write with token %d was accepted after B's %d", w.Token, tB)
	case !w.Stale:
		return fmt.Errorf("A's write failed, but not as stale: %s", w.Error)
	case w.Token != tA || w.Highest != tB:
		return fmt.Errorf("A's rejection says token %d against highest %d; want %d against %d", w.Token, w.Highest, tA, tB)
	case final.Status != statusB || final.Token != tB:
		return fmt.Errorf("order %s ends as status=%s token=%d; want status=%s token=%d", final.ID, final.Status, final.Token, statusB, tB)
	}
	return nil
}

// awaitExpiry polls CheckFence until token is no longer the live holder's
// of name. It fails after bound, or when ctx is done.
func awaitExpiry(ctx context.Context, lc leasegatev1connect.LockServiceClient, name string, token int64, bound time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	tick := time.NewTicker(expiryPoll)
	defer tick.Stop()
	for {
		resp, err := lc.CheckFence(wctx, connect.NewRequest(&v1.CheckFenceRequest{Name: name, FencingToken: token}))
		switch {
		case err == nil && !resp.Msg.Live:
			return nil
		case err != nil && wctx.Err() == nil:
			return fmt.Errorf("check A's token %d on %s: %w", token, name, err)
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("A's lease on %s did not expire within %s: is A really paused?", name, bound)
		case <-tick.C:
		}
	}
}

// narrator prints lines stamped with the time since it was made.
type narrator struct {
	w     io.Writer
	start time.Time
}

func newNarrator(w io.Writer) *narrator { return &narrator{w: w, start: time.Now()} }

// say prints one line, e.g. "[ 0.012s] A acquired order:42 …".
func (n *narrator) say(format string, args ...any) {
	fmt.Fprintf(n.w, "[%6.3fs] %s\n", time.Since(n.start).Seconds(), fmt.Sprintf(format, args...))
}
