package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func campaign(name, value string) AcquireRequest {
	r := req(ElectionName(name))
	r.Value = []byte(value)
	return r
}

func TestElectionNamesNeverMeetLockNames(t *testing.T) {
	e, cli := newEngine(t)
	lock := mustAcquire(t, e, req("x"))
	lead := mustAcquire(t, e, campaign("x", "v"))
	if keyCount(t, e, cli, "x") != 1 || keyCount(t, e, cli, ElectionName("x")) != 1 {
		t.Fatalf("lock x and election x share keys")
	}
	if err := ValidateName(ElectionName("x")); err == nil {
		t.Fatalf("ValidateName accepted an election's engine name: a lock could take an election's keys")
	}
	if err := ValidateKeyName(ElectionName("x")); err != nil {
		t.Fatalf("ValidateKeyName(ElectionName(x)) = %v", err)
	}
	if _, err := acquire(testCtx(t), e, AcquireRequest{Name: "y", TTL: 10 * time.Second, RequestID: "r", Value: []byte("v")}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a lock acquire with a value = %v; want ErrInvalidArgument", err)
	}
	if err := e.Proclaim(testCtx(t), lock.Handle, []byte("v")); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Proclaim on a lock = %v; want ErrInvalidArgument", err)
	}
	mustRelease(t, e, lock)
	mustRelease(t, e, lead)
}

func TestLeaderReadsValueAndNotFound(t *testing.T) {
	e, _ := newEngine(t)
	ctx := testCtx(t)
	if _, err := e.Leader(ctx, "svc"); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader of an empty election = %v; want ErrNoLeader", err)
	}
	g := mustAcquire(t, e, campaign("svc", "host-a:80"))
	l, err := e.Leader(ctx, "svc")
	if err != nil || string(l.Value) != "host-a:80" || l.Token != g.Token() || l.ClientID != "c" {
		t.Fatalf("Leader = %+v, %v; want host-a:80, token %d, client c", l, err, g.Token())
	}
	if err := e.Proclaim(ctx, g.Handle, []byte("host-a:81")); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	if l, err = e.Leader(ctx, "svc"); err != nil || string(l.Value) != "host-a:81" || l.Token != g.Token() {
		t.Fatalf("Leader after Proclaim = %+v, %v; want host-a:81 in the same term", l, err)
	}
	// A proclaim leaves the term's lease and ownership intact.
	if _, err := e.Renew(ctx, g.Handle, g.Token()); err != nil {
		t.Fatalf("Renew after Proclaim: %v", err)
	}
	mustRelease(t, e, g)
	if _, err := e.Leader(ctx, "svc"); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader after resign = %v; want ErrNoLeader", err)
	}
}

func TestProclaimByDeposedLeaderRefused(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	first := mustAcquire(t, e, campaign("svc", "a"))
	next := make(chan Grant, 1)
	onQueued, queued := queuedSignal()
	go func() {
		r := campaign("svc", "b")
		r.OnQueued = onQueued
		g, err := acquire(ctx, e, r)
		if err != nil {
			t.Errorf("second campaign: %v", err)
		}
		next <- g
	}()
	<-queued
	// The first leader's lease dies (as if it expired): it is deposed.
	if _, err := cli.Revoke(ctx, first.Lease); err != nil {
		t.Fatal(err)
	}
	second := <-next
	if second.Token() <= first.Token() {
		t.Fatalf("second term's token %d is not above the first's %d", second.Token(), first.Token())
	}
	err := e.Proclaim(ctx, first.Handle, []byte("stale"))
	if !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrStolen) {
		t.Fatalf("Proclaim by the deposed leader = %v; want ErrNotLeader and ErrStolen", err)
	}
	if l, err := e.Leader(ctx, "svc"); err != nil || string(l.Value) != "b" {
		t.Fatalf("Leader = %+v, %v; want the second leader's value b", l, err)
	}
	forged := second.Handle
	forged.Secret = first.Secret
	if err := e.Proclaim(ctx, forged, []byte("forged")); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Proclaim with the leader's key and another secret = %v; want ErrNotOwner", err)
	}
	mustRelease(t, e, second)
	if err := e.Proclaim(ctx, second.Handle, []byte("late")); !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrExpired) {
		t.Fatalf("Proclaim after resign = %v; want ErrNotLeader and ErrExpired", err)
	}
}

// A retry of a campaign takes the key over with a new record; it keeps the
// proclaimed value, and a proclaim after it still succeeds.
func TestTakeoverKeepsProclaimedValue(t *testing.T) {
	e, _ := newEngine(t)
	ctx := testCtx(t)
	r := campaign("svc", "v0")
	g := mustAcquire(t, e, r)
	if err := e.Proclaim(ctx, g.Handle, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	again := mustAcquire(t, e, r)
	if !again.Resumed || again.Token() != g.Token() {
		t.Fatalf("retry = %+v; want the same term resumed", again)
	}
	if l, err := e.Leader(ctx, "svc"); err != nil || string(l.Value) != "v1" {
		t.Fatalf("Leader after a takeover = %+v, %v; want the proclaimed v1", l, err)
	}
	if err := e.Proclaim(ctx, g.Handle, []byte("v2")); err != nil {
		t.Fatalf("Proclaim after a takeover: %v", err)
	}
	// Both attempts' give-ups compare a mod revision that is no longer
	// theirs (a takeover, then a proclaim, wrote the key since): neither
	// may remove the leader.
	e.Abandon(ctx, g)
	e.Abandon(ctx, again)
	e.tasks.Wait()
	if l, err := e.Leader(ctx, "svc"); err != nil || string(l.Value) != "v2" {
		t.Fatalf("Leader after a stale give-up = %+v, %v; want v2", l, err)
	}
	mustRelease(t, e, again)
}

// observer collects what Observe reports.
type observer struct {
	mu   sync.Mutex
	got  []*Leader
	seen chan struct{}
}

func startObserver(t *testing.T, e *Engine, name string, beforeWatch func(int64)) *observer {
	o := &observer{seen: make(chan struct{}, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.observeLeader(ctx, name, func(l *Leader) error {
			o.mu.Lock()
			o.got = append(o.got, l)
			o.mu.Unlock()
			o.seen <- struct{}{}
			return nil
		}, beforeWatch)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Observe ended with %v; want context.Canceled", err)
		}
	})
	return o
}

// next waits for the observer's next report and describes it: "none" or
// "value@token".
func (o *observer) next(t *testing.T) string {
	t.Helper()
	select {
	case <-o.seen:
	case <-time.After(20 * time.Second):
		t.Fatalf("no leader change reported; so far %s", o.String())
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return describeLeader(o.got[len(o.got)-1])
}

func (o *observer) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var s []string
	for _, l := range o.got {
		s = append(s, describeLeader(l))
	}
	return fmt.Sprint(s)
}

func describeLeader(l *Leader) string {
	if l == nil {
		return "none"
	}
	return fmt.Sprintf("%s@%d", l.Value, l.Token)
}

func TestObserveReportsCurrentThenEveryChange(t *testing.T) {
	e, _ := newEngine(t)
	ctx := testCtx(t)
	o := startObserver(t, e, "svc", nil)
	if got := o.next(t); got != "none" {
		t.Fatalf("first report = %s; want none", got)
	}
	a := mustAcquire(t, e, campaign("svc", "a"))
	if got, want := o.next(t), describeLeader(&Leader{Value: []byte("a"), Token: a.Token()}); got != want {
		t.Fatalf("report = %s; want %s", got, want)
	}
	// A waiter behind the leader changes nothing an observer sees.
	onQueued, queued := queuedSignal()
	bdone := make(chan Grant, 1)
	go func() {
		r := campaign("svc", "b")
		r.OnQueued = onQueued
		g, err := acquire(ctx, e, r)
		if err != nil {
			t.Errorf("campaign b: %v", err)
		}
		bdone <- g
	}()
	<-queued
	if err := e.Proclaim(ctx, a.Handle, []byte("a2")); err != nil {
		t.Fatal(err)
	}
	if got, want := o.next(t), describeLeader(&Leader{Value: []byte("a2"), Token: a.Token()}); got != want {
		t.Fatalf("report = %s; want %s (no report of the waiter in between)", got, want)
	}
	mustRelease(t, e, a)
	b := <-bdone
	if got, want := o.next(t), describeLeader(&Leader{Value: []byte("b"), Token: b.Token()}); got != want {
		t.Fatalf("report = %s; want %s", got, want)
	}
	mustRelease(t, e, b)
	if got := o.next(t); got != "none" {
		t.Fatalf("report = %s; want none", got)
	}
	// A late observer starts with the state now.
	c := mustAcquire(t, e, campaign("svc", "c"))
	late := startObserver(t, e, "svc", nil)
	if got, want := late.next(t), describeLeader(&Leader{Value: []byte("c"), Token: c.Token()}); got != want {
		t.Fatalf("a new observer's first report = %s; want %s", got, want)
	}
	mustRelease(t, e, c)
}

// An observer whose watch starts at a compacted revision reads again and
// watches from there: it reports the state now, and later changes.
func TestObserveSurvivesCompaction(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	a := mustAcquire(t, e, campaign("svc", "a"))
	var once sync.Once
	compacted := make(chan struct{})
	var b Grant
	o := startObserver(t, e, "svc", func(int64) {
		once.Do(func() {
			// Between the read and its watch: the leader changes and the
			// history the watch would start from is compacted away.
			if _, err := e.Release(ctx, a.Handle, a.Token()); err != nil {
				t.Errorf("resign a: %v", err)
			}
			var err error
			if b, err = acquire(ctx, e, campaign("svc", "b")); err != nil {
				t.Errorf("campaign b: %v", err)
			}
			if _, err := etcdtestCompact(cli); err != nil {
				t.Errorf("compact: %v", err)
			}
			close(compacted)
		})
	})
	if got, want := o.next(t), describeLeader(&Leader{Value: []byte("a"), Token: a.Token()}); got != want {
		t.Fatalf("first report = %s; want %s", got, want)
	}
	<-compacted
	if got, want := o.next(t), describeLeader(&Leader{Value: []byte("b"), Token: b.Token()}); got != want {
		t.Fatalf("report after compaction = %s; want %s", got, want)
	}
	if err := e.Proclaim(ctx, b.Handle, []byte("b2")); err != nil {
		t.Fatal(err)
	}
	if got, want := o.next(t), describeLeader(&Leader{Value: []byte("b2"), Token: b.Token()}); got != want {
		t.Fatalf("report = %s; want %s", got, want)
	}
	mustRelease(t, e, b)
	if got := o.next(t); got != "none" {
		t.Fatalf("report = %s; want none", got)
	}
}

// Campaigns from two engines (two gateways) on one election: at most one
// leader at any time, and every term's token is above the last.
func TestAtMostOneLeaderAcrossEngines(t *testing.T) {
	e1, cli := newEngine(t)
	e2, err := New(cli, e1.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e2.Close)
	ctx := testCtx(t)
	var (
		mu      sync.Mutex
		leading int
		last    int64
		terms   int
	)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		e := []*Engine{e1, e2}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				g, err := acquire(ctx, e, campaign("svc", fmt.Sprintf("c%d-%d", i, j)))
				if err != nil {
					t.Errorf("campaign: %v", err)
					return
				}
				mu.Lock()
				leading++
				if leading > 1 {
					t.Errorf("%d leaders at once", leading)
				}
				if g.Token() <= last {
					t.Errorf("term token %d after %d", g.Token(), last)
				}
				last = g.Token()
				terms++
				mu.Unlock()
				if err := e.Proclaim(ctx, g.Handle, []byte("still me")); err != nil {
					t.Errorf("Proclaim while leading: %v", err)
				}
				mu.Lock()
				leading--
				mu.Unlock()
				if ok, err := e.Release(ctx, g.Handle, g.Token()); !ok || err != nil {
					t.Errorf("resign = %v, %v", ok, err)
				}
			}
		}()
	}
	wg.Wait()
	if terms != 30 {
		t.Fatalf("%d terms; want 30", terms)
	}
	if n := keyCount(t, e1, cli, ElectionName("svc")); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// An observer ends with ErrClosed when its engine closes.
func TestObserveEndsWithItsEngine(t *testing.T) {
	e, _ := newEngine(t)
	seen := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- e.Observe(context.Background(), "svc", func(*Leader) error {
			seen <- struct{}{}
			return nil
		})
	}()
	<-seen
	e.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Observe after Close = %v; want ErrClosed", err)
	}
}
