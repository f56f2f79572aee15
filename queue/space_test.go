package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Key spaces: one engine serves every space of its cluster (engine.go),
// and what one space's caller presents — a handle, a session, a request
// id, a fencing token — means nothing in another. These tests attack one
// space with another's claims through the same engine, as a tenant would
// if the gateway routed it into the wrong space.

// spacesOf returns e acting in the tenant spaces a and b, nested under
// e's prefix as the gateway nests tenants.
func spacesOf(t *testing.T, e *Engine) (a, b *Engine) {
	t.Helper()
	a, err := e.Space(e.Prefix() + "/t/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err = e.Space(e.Prefix() + "/t/b")
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// A space is a Config.Prefix that neither lies inside another space's
// records nor holds another space's records inside its own.
func TestSpaceMustNotOverlapTheLayout(t *testing.T) {
	e, _ := newEngine(t)
	root := e.Prefix()
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{root, true},
		{root + "/t/acme", true},
		{"/elsewhere", true},
		{root + "/t/locks", true}, // a tenant called "locks" nests under /t/
		{"", false},
		{"relative", false},
		{root + "/t/a/", false},
		{root + "/locks", false},
		{root + "/locks/x", false},
		{root + "/locks-released", false},
		{root + "/sessions", false},
		{root + "/holds/x", false},
		{root + "/delays", false},
		{root + "/audit", false},
		{root + "/handoff", false},
	} {
		_, err := e.Space(tc.prefix)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Space(%q) = %v; want ok %v (a refusal is ErrInvalidArgument)", tc.prefix, err, tc.ok)
		}
	}
	// Nested the other way: the engine's own space inside a space's
	// records.
	if err := validSpace("/lg/sessions", "/lg"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("validSpace(/lg/sessions, /lg) = %v; want ErrInvalidArgument", err)
	}
}

// The same name and the same request id in two spaces are two locks and
// two acquires: both are granted at once, neither resumes the other's
// waiter, and their tokens differ.
func TestSameRequestIDInTwoSpacesIsTwoAcquires(t *testing.T) {
	e, cli := newEngine(t)
	a, b := spacesOf(t, e)
	r := AcquireRequest{Name: "n", TTL: 10 * time.Second, ClientID: "c", Owner: "o", RequestID: "same"}
	ga := mustAcquire(t, a, r)
	if w, err := b.Resume(testCtx(t), r); w != nil || err != nil {
		t.Fatalf("Resume in b of a's request id = %v, %v; want nothing found", w, err)
	}
	gb := mustAcquire(t, b, r)
	if gb.Resumed || gb.Token() == ga.Token() || gb.WaiterID != ga.WaiterID {
		t.Fatalf("b's acquire with a's request id: resumed %v, token %d (a's %d); want a fresh grant of the same waiter id", gb.Resumed, gb.Token(), ga.Token())
	}
	for _, s := range []*Engine{a, b} {
		if n := keyCount(t, s, cli, "n"); n != 1 {
			t.Errorf("space %s has %d keys of n; want its own one", s.Prefix(), n)
		}
	}
	if n := keyCount(t, e, cli, "n"); n != 0 {
		t.Errorf("the engine's own space has %d keys of n; want none", n)
	}
	mustRelease(t, a, ga)
	mustRelease(t, b, gb)
}

// A handle of space a names, in space b, a key of the same name and
// waiter id when b's caller used the same request id: the strongest
// confusion a misrouted lock id can make. It renews, releases, proclaims,
// abandons and awaits nothing of b's lock, and a's lock goes on.
func TestHandleOfOneSpaceActsInNoOther(t *testing.T) {
	e, cli := newEngine(t)
	a, b := spacesOf(t, e)
	for _, name := range []string{"n", ElectionName("el")} {
		r := AcquireRequest{Name: name, TTL: 10 * time.Second, ClientID: "c", Owner: "o", RequestID: "same"}
		ga, gb := mustAcquire(t, a, r), mustAcquire(t, b, r)
		ctx := testCtx(t)
		if _, err := b.Renew(ctx, ga.Handle, ga.Token()); err == nil {
			t.Errorf("%q: b.Renew(a's handle) succeeded", name)
		}
		if ok, err := b.Release(ctx, ga.Handle, ga.Token()); ok {
			t.Errorf("%q: b.Release(a's handle) = true, %v", name, err)
		}
		_, election := ElectionOf(name)
		if election {
			if err := b.Proclaim(ctx, ga.Handle, []byte("x")); err == nil {
				t.Errorf("%q: b.Proclaim(a's handle) succeeded", name)
			}
		}
		b.Abandon(ctx, ga)
		settle(e)
		// b's key of the same path is another incarnation, never deleted
		// while the call runs: the call ends with its context.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		end, err := b.AwaitEnd(actx, ga.Handle, ga.Token())
		cancel()
		if err == nil && end.Kind == EndReleased || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%q: b.AwaitEnd(a's handle) = %+v, %v; want it to find no lock of its own there", name, end, err)
		}
		if live, _, err := b.CheckFence(ctx, name, ga.Token()); !election && (live || err != nil) {
			t.Errorf("%q: b.CheckFence(a's token) = %v, %v; want a's token dead in b", name, live, err)
		}
		for _, s := range []struct {
			e *Engine
			g Grant
		}{{a, ga}, {b, gb}} {
			if n := keyCount(t, s.e, cli, name); n != 1 {
				t.Fatalf("%q: space %s has %d keys after the attacks; want its holder's", name, s.e.Prefix(), n)
			}
			if _, err := s.e.Renew(ctx, s.g.Handle, s.g.Token()); err != nil {
				t.Errorf("%q: the holder in %s after the attacks: %v", name, s.e.Prefix(), err)
			}
		}
		mustRelease(t, a, ga)
		mustRelease(t, b, gb)
	}
}

// A session belongs to the space that opened it: another space's acquire
// cannot ride on it, renew it or close it, and a's session and locks live
// on.
func TestSessionOfOneSpaceServesNoOther(t *testing.T) {
	e, cli := newEngine(t)
	a, b := spacesOf(t, e)
	ctx := testCtx(t)
	s, err := a.OpenSession(ctx, "c", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	held := mustAcquire(t, a, AcquireRequest{Name: "n", TTL: 10 * time.Second, ClientID: "c", RequestID: "a-held", Session: s.Lease, SessionSecret: s.Secret})
	for _, r := range []AcquireRequest{
		{Name: "m", TTL: 10 * time.Second, ClientID: "c", RequestID: "b-try", Session: s.Lease, SessionSecret: s.Secret},
		{Name: "n", TTL: 10 * time.Second, ClientID: "c", RequestID: "b-reenter", Session: s.Lease, SessionSecret: s.Secret, Reentrant: true},
	} {
		if res, err := b.TryAcquire(ctx, r); !errors.Is(err, ErrSessionLost) {
			t.Errorf("b.TryAcquire(%s) in a's session = %+v, %v; want ErrSessionLost", r.RequestID, res, err)
		}
		if _, err := acquire(ctx, b, r); !errors.Is(err, ErrSessionLost) {
			t.Errorf("b.Acquire(%s) in a's session = %v; want ErrSessionLost", r.RequestID, err)
		}
	}
	if _, err := b.KeepAliveSession(ctx, s.Lease, s.Secret); !errors.Is(err, ErrSessionLost) {
		t.Errorf("b.KeepAliveSession(a's session) = %v; want ErrSessionLost", err)
	}
	if err := b.CloseSession(ctx, s.Lease, s.Secret); err != nil {
		t.Errorf("b.CloseSession(a's session) = %v; want nil: nothing of b's to close", err)
	}
	if !leaseAlive(t, cli, s.Lease) {
		t.Fatal("b's close revoked a's session lease")
	}
	if _, err := a.KeepAliveSession(ctx, s.Lease, s.Secret); err != nil {
		t.Errorf("a's session after b's attempts: %v", err)
	}
	if n := keyCount(t, b, cli, "m") + keyCount(t, b, cli, "n"); n != 0 {
		t.Errorf("b has %d keys after its refused acquires; want none", n)
	}
	mustRelease(t, a, held)
	if err := a.CloseSession(ctx, s.Lease, s.Secret); err != nil {
		t.Fatal(err)
	}
}

// A lease the pool recycles from one space's lock to another's: the
// first lock's id, presented again in its own space, renews and releases
// nothing, and the lock now on the lease is untouched.
func TestRecycledLeaseAcrossSpaces(t *testing.T) {
	e, _, clk := newPoolEngine(t, 2)
	a, b := spacesOf(t, e)
	mustRelease(t, e, mustAcquire(t, e, req("fill")))
	settle(e)
	ga := mustAcquire(t, a, req("n"))
	mustRelease(t, a, ga)
	clk.Advance(poolQuarantine)
	var gb Grant
	for i := 0; i < 4 && gb.Lease != ga.Lease; i++ {
		gb = mustAcquire(t, b, req("n"))
		settle(e)
		if gb.Lease != ga.Lease {
			mustRelease(t, b, gb)
		}
	}
	if gb.Lease != ga.Lease {
		t.Fatalf("a's released lease %x never went to a lock of b: one pool serves every space", int64(ga.Lease))
	}
	ctx := testCtx(t)
	if _, err := a.Renew(ctx, ga.Handle, ga.Token()); !errors.Is(err, ErrReleased) {
		t.Errorf("a.Renew(a's released lock on the recycled lease) = %v; want ErrReleased", err)
	}
	if ok, err := a.Release(ctx, ga.Handle, ga.Token()); ok || err != nil {
		t.Errorf("a.Release(a's released lock) = %v, %v; want false, nil", ok, err)
	}
	if _, err := b.Renew(ctx, ga.Handle, ga.Token()); err == nil {
		t.Error("b.Renew(a's released lock id naming b's lease) succeeded")
	}
	if _, err := b.Renew(ctx, gb.Handle, gb.Token()); err != nil {
		t.Errorf("b's lock on the recycled lease: %v", err)
	}
	mustRelease(t, b, gb)
}

// The session waiters of two spaces ride on the engine's one attempt
// lease, and each learns of its own session's end, from its own space's
// session watch: b's session closing ends b's waiter and not a's.
func TestSpacesShareTheAttemptLeaseAndWatchTheirOwnSessions(t *testing.T) {
	e, cli := newEngine(t)
	a, b := spacesOf(t, e)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	type waiting struct {
		sp   *Engine
		sess Session
		held Grant
		done chan error
	}
	var ws []waiting
	for _, sp := range []*Engine{a, b} {
		held := mustAcquire(t, sp, req("n"))
		s, err := sp.OpenSession(ctx, "c", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r := req("n")
		r.Session, r.SessionSecret = s.Lease, s.Secret
		w, err := sp.Enqueue(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := w.Wait(ctx); done <- err }()
		ws = append(ws, waiting{sp, s, held, done})
	}
	leases := map[int64]bool{}
	for _, w := range ws {
		resp, err := cli.Get(ctx, w.sp.keys.namePrefix("n"), clientv3.WithLastCreate()...)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("the waiter's key in %s: %v, %v", w.sp.Prefix(), resp, err)
		}
		leases[resp.Kvs[0].Lease] = true
	}
	if len(leases) != 1 {
		t.Errorf("the session waiters of two spaces ride on %d attempt leases; want the engine's one", len(leases))
	}
	if err := b.CloseSession(ctx, ws[1].sess.Lease, ws[1].sess.Secret); err != nil {
		t.Fatal(err)
	}
	if err := within(t, ws[1].done, 10*time.Second, "b's waiter"); !errors.Is(err, ErrSessionLost) {
		t.Errorf("b's waiter after its session closed: %v; want ErrSessionLost", err)
	}
	select {
	case err := <-ws[0].done:
		t.Fatalf("a's waiter ended with b's session: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	mustRelease(t, a, ws[0].held)
	if err := within(t, ws[0].done, 10*time.Second, "a's waiter"); err != nil {
		t.Errorf("a's waiter after a's holder released: %v; want the grant", err)
	}
	mustRelease(t, b, ws[1].held)
}

// An awaiter of a lock's end in one space is woken by that space's
// eviction alone: the same name force-released in another space ends
// nothing of it.
func TestAwaitEndHearsItsOwnSpace(t *testing.T) {
	e, _ := newEngine(t)
	a, b := spacesOf(t, e)
	ctx := testCtx(t)
	ga, gb := mustAcquire(t, a, req("n")), mustAcquire(t, b, req("n"))
	type ended struct {
		end End
		err error
	}
	done := make(chan ended, 1)
	go func() {
		end, err := a.AwaitEnd(ctx, ga.Handle, ga.Token())
		done <- ended{end, err}
	}()
	if _, err := b.ForceRelease(ctx, ForceReleaseRequest{Name: "n", Reason: "test", Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		t.Fatalf("a's AwaitEnd ended with b's eviction: %+v, %v", got.end, got.err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := b.Renew(ctx, gb.Handle, gb.Token()); !errors.Is(err, ErrEvicted) {
		t.Errorf("b's evicted holder renews: %v; want ErrEvicted", err)
	}
	if _, err := a.ForceRelease(ctx, ForceReleaseRequest{Name: "n", Reason: "test", Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	if got := within(t, done, 10*time.Second, "a's AwaitEnd"); got.err != nil || got.end.Kind != EndEvicted {
		t.Errorf("a's AwaitEnd after a's eviction = %+v, %v; want EndEvicted", got.end, got.err)
	}
	recs, _, err := a.ListAudit(ctx, "", 10)
	if err != nil || len(recs) != 1 {
		t.Errorf("a's audit = %d records, %v; want its one eviction", len(recs), err)
	}
}

// The record sweep covers every space the engine served, and
// CountAllLocks counts their keys: a space's unclean loss that no acquire
// looks at again is stamped by the engine's sweep.
func TestSweepAndCountsCoverEverySpaceServed(t *testing.T) {
	e, cli := newEngine(t)
	a, b := spacesOf(t, e)
	ctx := testCtx(t)
	mustAcquire(t, e, req("root"))
	mustAcquire(t, a, req("n"))
	g := mustAcquire(t, b, req("n")) // first: its holder record is written with its key
	if n, err := e.CountAllLocks(ctx); err != nil || n != 3 {
		t.Errorf("CountAllLocks = %d, %v; want the 3 keys of 3 spaces", n, err)
	}
	if _, err := cli.Revoke(ctx, g.Lease); err != nil {
		t.Fatal(err)
	}
	rec := b.keys.holderRecord("n", g.WaiterID)
	stamp := func() string {
		resp, err := cli.Get(ctx, rec)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("b's holder record: %v, %v", resp, err)
		}
		return strings.Fields(string(resp.Kvs[0].Value))[2]
	}
	if s := stamp(); s != "0" {
		t.Fatalf("the record was stamped before the sweep: %s", s)
	}
	e.sweepAll(ctx, 0)
	if s := stamp(); s == "0" {
		t.Error("the engine's sweep left b's unclean loss unstamped")
	}
}

// Each space's watches have a budget of their own: a space that spends
// its budget refuses nothing of another's.
func TestWatchBudgetIsPerSpace(t *testing.T) {
	e, cli := newEngine(t, func(c *Config) { c.MaxWatchKeys = 10 })
	a, b := spacesOf(t, e)
	lease, err := cli.Grant(testCtx(t), 300)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Engine{a, b} {
		putMany(t, s, cli, "w/", 8, lease.ID)
	}
	openWatcher(t, a, "w/")
	openWatcher(t, b, "w/")
	if n := e.watches.held(a.Prefix()) + e.watches.held(b.Prefix()); n != 16 {
		t.Errorf("the two spaces' views hold %d keys; want 8 each", n)
	}
	if err := a.WatchLocks(testCtx(t), "w/x", 0, func(WatchBatch) error { return errors.New("stop") }); err == nil || errors.Is(err, ErrWatchBudget) {
		t.Errorf("a's second watch within its budget: %v", err)
	}
	putMany(t, a, cli, "v/", 3, lease.ID)
	if err := a.WatchLocks(testCtx(t), "v/", 0, func(WatchBatch) error { return nil }); !errors.Is(err, ErrWatchBudget) {
		t.Errorf("a's watch past its own budget: %v; want ErrWatchBudget", err)
	}
}
