package queue

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/etcdtest"
)

// delaysWaited counts the times a schedule let time pass to end a
// lock-delay a grant waited on.
var delaysWaited atomic.Int64

// The interleaving explorer.
//
// It runs two to four actors — clients of the engine, on one or two
// "gateways" (engines over the same keys) — against the real etcd, and
// orders every step they take: each actor stops at each of the engine's
// interleaving points (hooks.go) and at its own between calls, and the
// scheduler lets exactly one of them go at a time. A waiter that blocks
// on its watches is parked; after every step the scheduler reads etcd to
// learn which parked waiters that step must wake, and waits for them, so
// the next choice never depends on timing. Given its seed a schedule is
// reproducible, and a failure prints the seed and the steps.
//
// After every step it checks what the engine promises (explore_check_test.go):
// at most one actor holds a name, and its key is the first; a holder's key
// is never deleted by anyone but itself or an expiry; tokens only grow;
// when nobody can move, nobody is left waiting; and a finished run leaves
// no key behind. TestExploreTenants runs two worlds at once, each in a key
// space of its own on the same engines, and checks each.
//
// `go test ./queue -run TestExplore` runs the quick mode; LEASEGATE_EXPLORE=long
// (or -explore.long) runs at least 10,000 schedules; -explore.seed replays one.

var (
	exploreLong      = flag.Bool("explore.long", false, "run the explorer's long mode (10,000 schedules); also LEASEGATE_EXPLORE=long")
	exploreSeed      = flag.Uint64("explore.seed", 0, "replay the schedule with this seed")
	exploreSchedules = flag.Int("explore.schedules", 0, "override the number of schedules")
)

// Actor states.
const (
	actRunning = iota // executing until its next point
	actReady          // stopped at a point, waiting to be chosen
	actParked         // blocked on its watches
	actDone
)

type actor struct {
	name    string
	state   int
	point   string
	release chan struct{}
	parked  parked
	// wake is set when a step did something that wakes the actor without
	// etcd showing it (its context was cancelled).
	wake bool
}

// scheduler implements hooks and orders the actors.
type scheduler struct {
	t    testing.TB
	cli  *clientv3.Client
	rng  *rand.Rand
	seed uint64

	mu     sync.Mutex
	cond   *sync.Cond
	actors map[string]*actor
	order  []string // registration order, for deterministic choice
	spawns map[string]int
	steps  []string
	last   string
	// version counts state changes, so settle can tell whether anything
	// changed between reading the states and waiting for a change.
	version uint64
	// free lets every actor run unscheduled once a schedule has failed, so
	// it can be torn down.
	free atomic.Bool
	// pct, when set, schedules by priority (PCT): the ready actor with the
	// highest priority goes, and at a few random steps the one that just
	// went drops to the lowest priority. It finds orderings of small depth
	// (one actor overtaking another between two given steps) far more
	// often than a random walk.
	pct     bool
	prio    map[string]int
	changes map[int]bool
	lowest  int
	// onLease, when set, receives the engine's lease events.
	onLease func(ctx context.Context, event string, id clientv3.LeaseID, rev int64)
	// vanish makes actors vanish mid-call: at its given point count, the
	// actor's context ends (its caller went away), whatever it is doing.
	vanish map[string]*vanishing
	// certs are what the grants made rest on, as the engine reported them.
	certs map[grantRef]grantCert
}

// grantRef names one grant: its key, the granting attempt's write and,
// for a re-entered hold, the hold's nonce.
type grantRef struct {
	rev, attempt int64
	hold         string
}

// grantCert is what a grant rests on (hooks.granted).
type grantCert struct{ asOf, heldFrom int64 }

func refOf(g Grant) grantRef { return grantRef{g.Revision, g.attempt, g.hold} }

func (s *scheduler) granted(_ context.Context, g Grant, asOf, heldFrom int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.certs[refOf(g)] = grantCert{asOf, heldFrom}
}

// cert is what the engine said g rests on when it made it.
func (s *scheduler) cert(g Grant) (grantCert, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.certs[refOf(g)]
	return c, ok
}

// vanishing is when an actor's caller goes away.
type vanishing struct {
	at, seen int
	cancel   context.CancelFunc
	gone     bool
}

func newScheduler(t testing.TB, cli *clientv3.Client, seed uint64) *scheduler {
	s := &scheduler{t: t, cli: cli, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x1ea5e6a7e)),
		actors: map[string]*actor{}, spawns: map[string]int{}, vanish: map[string]*vanishing{},
		certs: map[grantRef]grantCert{}}
	s.cond = sync.NewCond(&s.mu)
	if s.rng.IntN(2) == 0 {
		s.pct, s.prio, s.changes = true, map[string]int{}, map[int]bool{}
		for d := 1 + s.rng.IntN(3); d > 0; d-- {
			s.changes[s.rng.IntN(60)] = true
		}
	}
	return s
}

// priority returns name's PCT priority, drawing one on first use.
func (s *scheduler) priority(name string) int {
	p, ok := s.prio[name]
	if !ok {
		p = 1000 + s.rng.IntN(1000)
		s.prio[name] = p
	}
	return p
}

// register adds an actor that starts running now.
func (s *scheduler) register(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actors[name] = &actor{name: name, state: actRunning, release: make(chan struct{}, 1)}
	s.order = append(s.order, name)
}

func (s *scheduler) actorOf(ctx context.Context) *actor {
	name := actorOf(ctx)
	a := s.actors[name]
	if a == nil {
		panic(fmt.Sprintf("explore: unknown actor %q", name))
	}
	return a
}

// at stops the calling actor until the scheduler chooses it.
func (s *scheduler) at(ctx context.Context, point string) {
	if s.free.Load() {
		return
	}
	s.mu.Lock()
	a := s.actorOf(ctx)
	a.state, a.point = actReady, point
	s.version++
	s.cond.Broadcast()
	v := s.vanish[a.name]
	s.mu.Unlock()
	<-a.release
	if v != nil {
		// Counted when the actor goes on from the point: its caller goes
		// away between this point and the next.
		s.mu.Lock()
		if v.seen++; v.seen == v.at && !v.gone {
			v.gone = true
			s.steps[len(s.steps)-1] += " (vanishes)"
			v.cancel()
		}
		s.mu.Unlock()
	}
}

// vanishAt makes name's caller go away after its at-th point.
func (s *scheduler) vanishAt(name string, at int, cancel context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vanish[name] = &vanishing{at: at, cancel: cancel}
}

// vanished reports whether name's caller went away.
func (s *scheduler) vanished(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vanish[name]
	return v != nil && v.gone
}

func (s *scheduler) spawn(ctx context.Context, task string) context.Context {
	s.mu.Lock()
	parent := actorOf(ctx)
	s.spawns[parent]++
	name := fmt.Sprintf("%s.%s%d", parent, task, s.spawns[parent])
	s.actors[name] = &actor{name: name, state: actRunning, release: make(chan struct{}, 1)}
	s.order = append(s.order, name)
	s.mu.Unlock()
	return withActor(ctx, name)
}

func (s *scheduler) park(ctx context.Context, p parked) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.actorOf(ctx)
	a.state, a.parked = actParked, p
	s.version++
	s.cond.Broadcast()
}

func (s *scheduler) unpark(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.actorOf(ctx)
	a.state, a.wake = actRunning, false
	s.version++
	s.cond.Broadcast()
}

func (s *scheduler) lease(ctx context.Context, event string, id clientv3.LeaseID, rev int64) {
	if s.onLease != nil && !s.free.Load() {
		s.onLease(ctx, event, id, rev)
	}
}

// done marks an actor finished.
func (s *scheduler) done(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actors[name].state = actDone
	s.version++
	s.cond.Broadcast()
}

// end marks a background task finished.
func (s *scheduler) end(ctx context.Context) { s.done(actorOf(ctx)) }

// markWake records that the current step wakes name (its context was
// cancelled).
func (s *scheduler) markWake(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.actors[name]; a != nil && a.state == actParked {
		a.wake = true
	}
}

// settle waits until no actor runs and every parked actor that etcd (or a
// cancellation) says must wake has woken. It returns an error when one
// does not wake in time: a waiter that missed its wake-up.
func (s *scheduler) settle() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		for s.anyRunning() {
			if !s.waitUntil(deadline) {
				desc := s.describeLocked()
				s.mu.Unlock()
				if os.Getenv("LEASEGATE_EXPLORE_STACKS") != "" {
					buf := make([]byte, 1<<20)
					fmt.Fprintf(os.Stderr, "%s\n", buf[:runtime.Stack(buf, true)])
				}
				return fmt.Errorf("an actor did not reach its next point within 10s: %s", desc)
			}
		}
		seen := s.version
		var parkedActors []*actor
		why := ""
		for _, name := range s.order {
			a := s.actors[name]
			if a.state == actParked {
				if a.wake {
					why = name + "'s context was cancelled"
				}
				parkedActors = append(parkedActors, a)
			}
		}
		s.mu.Unlock()
		if why == "" && len(parkedActors) > 0 {
			var err error
			if why, err = s.dueByEtcd(parkedActors); err != nil {
				return err
			}
		}
		if why == "" {
			return nil
		}
		// Someone must wake: wait for a state change (unless one happened
		// since the states were read) and look again.
		s.mu.Lock()
		changed := true
		if s.version == seen {
			changed = s.waitUntil(deadline)
		}
		s.mu.Unlock()
		if !changed {
			if os.Getenv("LEASEGATE_EXPLORE_STACKS") != "" {
				buf := make([]byte, 1<<20)
				fmt.Fprintf(os.Stderr, "%s\n", buf[:runtime.Stack(buf, true)])
			}
			return fmt.Errorf("a parked waiter never woke (%s): %s", why, s.describe())
		}
	}
}

// waitUntil waits for a broadcast, or returns false at deadline. Called
// with s.mu held.
func (s *scheduler) waitUntil(deadline time.Time) bool {
	if time.Now().After(deadline) {
		return false
	}
	t := time.AfterFunc(time.Until(deadline), func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	s.cond.Wait()
	t.Stop()
	return !time.Now().After(deadline)
}

func (s *scheduler) anyRunning() bool {
	for _, a := range s.actors {
		if a.state == actRunning {
			return true
		}
	}
	return false
}

// dueByEtcd reports why etcd shows a parked actor must wake, or "". A
// waiter is judged at its hub's view revision, so a hub that has not yet
// applied an event does not make its waiters due; the hub is due instead,
// while etcd shows a change under its prefix past its view.
func (s *scheduler) dueByEtcd(as []*actor) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range as {
		p := a.parked
		if !p.until.IsZero() {
			if !p.now().Before(p.until) {
				return fmt.Sprintf("%s's lock-delay is over", a.name), nil
			}
			continue
		}
		if p.hub {
			if p.closing() {
				return fmt.Sprintf("%s has no waiters left", a.name), nil
			}
			rev := p.viewRev()
			now, err := s.cli.Get(ctx, p.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				return "", err
			}
			then, err := s.cli.Get(ctx, p.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(rev))
			if err != nil {
				return "", err
			}
			if !sameKeys(now.Kvs, then.Kvs) {
				return fmt.Sprintf("%s's view at %d is behind etcd", a.name, rev), nil
			}
			continue
		}
		if p.session != "" {
			resp, err := s.cli.Get(ctx, p.session, clientv3.WithCountOnly())
			if err != nil {
				return "", err
			}
			if resp.Count == 0 {
				return fmt.Sprintf("%s's session is gone", a.name), nil
			}
		}
		rev := p.viewRev()
		if rev < p.ownMod {
			continue // its hub has not seen its own write yet: the hub is due
		}
		n := max(p.limit, 1)
		resp, err := s.cli.Txn(ctx).Then(
			clientv3.OpGet(p.own, clientv3.WithKeysOnly(), clientv3.WithRev(rev)),
			clientv3.OpGet(p.prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend),
				clientv3.WithLimit(int64(n)), clientv3.WithRev(rev))).Commit()
		if err != nil {
			return "", err
		}
		own, firstN := firstKV(resp.Responses[0]), resp.Responses[1].GetResponseRange().GetKvs()
		switch {
		case own == nil || own.CreateRevision != p.myRev || own.ModRevision != p.ownMod:
			return fmt.Sprintf("%s's own key changed since %d (at %d: %v)", a.name, p.ownMod, rev, own), nil
		case holdsByLimit(firstN, p.myRev, n):
			return fmt.Sprintf("%s holds at %d", a.name, rev), nil
		}
	}
	return "", nil
}

// holdsByLimit is the checker's own statement of the grant condition: the
// key created at create is among kvs (the first n keys by create
// revision, in order), and every key before it records limit n.
func holdsByLimit(kvs []*mvccpb.KeyValue, create int64, n int) bool {
	for _, kv := range kvs {
		if kv.CreateRevision == create {
			return true
		}
		m, err := decodeValue(kv.Value)
		if err != nil || max(m.Limit, 1) != n {
			return false
		}
	}
	return false
}

// sameKeys reports whether two keys-only reads found the same keys with
// the same identities and writes.
func sameKeys(a, b []*mvccpb.KeyValue) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i].Key) != string(b[i].Key) || a[i].CreateRevision != b[i].CreateRevision || a[i].ModRevision != b[i].ModRevision {
			return false
		}
	}
	return true
}

// next chooses the actor that goes next and lets it go. It returns false
// when no actor is ready (everyone is done or parked).
func (s *scheduler) next() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ready []string
	for _, name := range s.order {
		if s.actors[name].state == actReady {
			ready = append(ready, name)
		}
	}
	if len(ready) == 0 {
		return "", false
	}
	var pick string
	if s.pct {
		for _, r := range ready {
			if pick == "" || s.priority(r) > s.priority(pick) {
				pick = r
			}
		}
		if s.changes[len(s.steps)] {
			s.lowest--
			s.prio[pick] = s.lowest
		}
	} else {
		// Mostly random, with a bias to let the same actor go on: long
		// uninterrupted runs find other bugs than fine-grained ones.
		pick = ready[s.rng.IntN(len(ready))]
		if s.last != "" && s.rng.IntN(3) == 0 {
			for _, r := range ready {
				if r == s.last {
					pick = r
				}
			}
		}
	}
	a := s.actors[pick]
	s.steps = append(s.steps, pick+"@"+a.point)
	s.last = pick
	a.state = actRunning
	a.release <- struct{}{}
	return pick, true
}

// delayedUntil is the earliest end of a lock-delay an actor is parked on;
// zero when none is.
func (s *scheduler) delayedUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var at time.Time
	for _, a := range s.actors {
		if a.state == actParked && !a.parked.until.IsZero() && (at.IsZero() || a.parked.until.Before(at)) {
			at = a.parked.until
		}
	}
	return at
}

// stuck lists the actors that are not done.
func (s *scheduler) unfinished() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, name := range s.order {
		if s.actors[name].state != actDone {
			out = append(out, name)
		}
	}
	return out
}

func (s *scheduler) describe() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.describeLocked()
}

func (s *scheduler) describeLocked() string {
	var b strings.Builder
	names := append([]string(nil), s.order...)
	sort.Strings(names)
	for _, n := range names {
		a := s.actors[n]
		state := []string{"running", "ready", "parked", "done"}[a.state]
		fmt.Fprintf(&b, "\n  %s: %s", n, state)
		if a.state == actReady {
			fmt.Fprintf(&b, " at %s", a.point)
		}
		if a.state == actParked && a.parked.hub {
			fmt.Fprintf(&b, " (hub) at view %d", a.parked.viewRev())
		} else if a.state == actParked {
			fmt.Fprintf(&b, " as %s@%d, hub view at %d", a.parked.own[strings.LastIndexByte(a.parked.own, '/')+1:], a.parked.myRev, a.parked.viewRev())
		}
	}
	return b.String()
}

func (s *scheduler) trace() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.steps, " → ")
}

// exploreConfig sizes a run.
type exploreConfig struct {
	schedules int
	workers   int
	// spaces are the key spaces of a schedule's worlds, relative to the
	// engines' prefix: one world each, on the same engines. None is one
	// world in the engines' own space.
	spaces []string
}

func exploreMode() exploreConfig {
	if *exploreLong || os.Getenv("LEASEGATE_EXPLORE") == "long" {
		return exploreConfig{schedules: 10000, workers: 2}
	}
	return exploreConfig{schedules: 1000, workers: 2}
}

// TestExplore runs the explorer: the quick mode by default, the long mode
// with LEASEGATE_EXPLORE=long, one schedule with -explore.seed.
func TestExplore(t *testing.T) {
	explore(t, exploreMode(), 0, (*world).cast)
}

// TestExploreSemaphore runs the explorer over semaphores of limit 2 or 3
// (drawn from each seed), a quarter as many schedules as TestExplore.
func TestExploreSemaphore(t *testing.T) {
	cfg := exploreMode()
	cfg.schedules /= 4
	explore(t, cfg, 2, (*world).cast)
}

// TestExploreTenants runs the explorer with two tenants on the same
// engines: a world in the engines' own key space and one in a tenant's
// space nested under it, each cast from the usual menu, contending for
// the same name with the same client names and request ids, every world
// checked after every step by the checkers above. The worlds share the
// engines' attempt lease, lease pools (the lease checks span both) and
// hubs' engine, so a call that strays into the other space, a lease
// recycled across them, a session or an end heard in the wrong space
// breaks one world's beliefs. A quarter of the mode's schedules, a lock
// or a semaphore world by seed.
func TestExploreTenants(t *testing.T) {
	cfg := exploreMode()
	cfg.schedules /= 4
	cfg.spaces = []string{"", "/t/b"}
	explore(t, cfg, 0, (*world).castTenant)
}

// castTenant casts a world of TestExploreTenants: the usual menu, or, for
// one seed in three, a semaphore of limit 2 (a world's limit is its own:
// the other space's name may be a lock).
func (w *world) castTenant() {
	if w.rng.IntN(3) == 0 {
		w.limit = 2
	}
	w.cast()
}

// explore runs cfg's schedules of the actors cast picks; limit 0 runs lock
// worlds, and a positive limit semaphore worlds of limit, or limit+1 by
// seed.
func explore(t *testing.T, cfg exploreConfig, limit int, cast func(*world)) {
	if *exploreSchedules > 0 {
		cfg.schedules = *exploreSchedules
	}
	if *exploreSeed != 0 {
		cfg.schedules, cfg.workers = 1, 1
	}
	base := *exploreSeed
	if base == 0 {
		base = uint64(time.Now().UnixNano())
	}
	t.Logf("explorer: %d schedules from seed %d", cfg.schedules, base)
	var next atomic.Int64
	var failed atomic.Int64
	var steps atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for w := 0; w < cfg.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if int(i) >= cfg.schedules || failed.Load() > 0 {
					return
				}
				seed := base + uint64(i)
				n, err := runSchedule(t, seed, limit, cfg.spaces, cast)
				steps.Add(int64(n))
				if err != nil {
					failed.Add(1)
					t.Errorf("schedule seed %d failed (replay: go test ./queue -run '%s$' -explore.seed %d -v):\n%v", seed, t.Name(), seed, err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("explorer: %d schedules, %d steps, %d violations, %d lock-delays waited out, in %s; %d pooled leases handed out again, %d renewals of locks on them, "+
		"%d renewal keepalives sent after the renewed key was deleted",
		min(int(next.Load()), cfg.schedules), steps.Load(), failed.Load(), delaysWaited.Load(), time.Since(began).Round(time.Millisecond),
		exploreRecycled.Load(), exploreRenewedRecycled.Load(), exploreStaleSends.Load())
}

// runSchedule runs one seeded schedule of the actors cast picks, a world
// in each of spaces (none: one in the engines' own), and returns its step
// count.
func runSchedule(t *testing.T, seed uint64, limit int, spaces []string, cast func(*world)) (int, error) {
	// Clients live as long as the schedule: thousands of schedules must not
	// pile up connections.
	var clients []*clientv3.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	dial := func() (*clientv3.Client, error) {
		c, err := etcdtest.NewClient(shared.Endpoint())
		if err == nil {
			clients = append(clients, c)
		}
		return c, err
	}
	cli, err := dial()
	if err != nil {
		return 0, err
	}
	sch := newScheduler(t, cli, seed)
	prefix := fmt.Sprintf("/explore/%d", seed)
	var engines []*Engine
	// One clock for both gateways: the explorer's clock actor moves it,
	// past pool quarantines and renewals' proof windows.
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for i := 0; i < 2; i++ {
		c, err := dial()
		if err != nil {
			return 0, err
		}
		cfg := DefaultConfig()
		cfg.Prefix = prefix
		cfg.Clock = clk
		cfg.AttemptTTL = 60 * time.Second
		cfg.LeasePool = explorePool
		e, err := New(c, cfg)
		if err != nil {
			return 0, err
		}
		// Filled before the run, so that the first acquires already take
		// pooled leases and give them back.
		if err := e.pool.prefill(context.Background(), int64(exploreTTL/time.Second)); err != nil {
			e.Close()
			return 0, err
		}
		e.hooks = sch
		engines = append(engines, e)
	}
	if len(spaces) == 0 {
		spaces = []string{""}
	}
	var ws []*world
	for i, sp := range spaces {
		views := make([]*Engine, len(engines))
		for j, e := range engines {
			if views[j], err = e.Space(prefix + sp); err != nil {
				return 0, err
			}
		}
		w := newWorld(sch, views, prefix, seed)
		if i > 0 {
			w.rng = rand.New(rand.NewPCG(seed, 0xac7025+uint64(i)))
			w.tag = strings.TrimPrefix(sp, "/t/") + "."
			w.leases = ws[0].leases
		}
		w.clock = clk
		// Both engines share clk: the world moves it once.
		w.clocks = []*clock.Fake{clk}
		if limit > 0 {
			w.limit = limit + w.rng.IntN(2)
		}
		ws = append(ws, w)
	}
	sch.onLease = ws[0].leaseEvent
	defer func() {
		for _, w := range ws {
			w.cancelAll()
			for _, f := range w.after {
				f()
			}
		}
		for _, e := range engines {
			e.Close()
		}
	}()
	var names []string
	for _, w := range ws {
		w.peers = ws
		cast(w)
		names = append(names, w.castNames()...)
	}
	err = runWorlds(ws)
	if err != nil {
		return len(sch.steps), fmt.Errorf("%v\nactors: %s\nsteps: %s", err, strings.Join(names, ", "), sch.trace())
	}
	return len(sch.steps), nil
}
