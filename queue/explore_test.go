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

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/etcdtest"
)

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
// no key behind.
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
}

func newScheduler(t testing.TB, cli *clientv3.Client, seed uint64) *scheduler {
	s := &scheduler{t: t, cli: cli, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x1ea5e6a7e)),
		actors: map[string]*actor{}, spawns: map[string]int{}}
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
	s.mu.Unlock()
	<-a.release
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

// dueByEtcd reports why etcd shows a parked actor must wake, or "".
func (s *scheduler) dueByEtcd(as []*actor) (string, error) {
	var ops []clientv3.Op
	for _, a := range as {
		sess := a.parked.own // a key that exists: a waiter without a session has none to lose
		if a.parked.session != "" {
			sess = a.parked.session
		}
		ops = append(ops, clientv3.OpGet(a.parked.pred, clientv3.WithKeysOnly()), clientv3.OpGet(a.parked.own, clientv3.WithKeysOnly()),
			clientv3.OpGet(sess, clientv3.WithKeysOnly()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return "", err
	}
	for i, a := range as {
		pred, own, sess := firstKV(resp.Responses[3*i]), firstKV(resp.Responses[3*i+1]), firstKV(resp.Responses[3*i+2])
		switch {
		case pred == nil || pred.CreateRevision != a.parked.predRev:
			return fmt.Sprintf("%s's predecessor created at %d is gone", a.name, a.parked.predRev), nil
		case own == nil || own.ModRevision != a.parked.ownMod:
			return fmt.Sprintf("%s's own key changed since %d (now %v)", a.name, a.parked.ownMod, own), nil
		case sess == nil:
			return fmt.Sprintf("%s's session is gone", a.name), nil
		}
	}
	return "", nil
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
		if a.state == actParked {
			fmt.Fprintf(&b, " behind %s@%d", a.parked.pred[strings.LastIndexByte(a.parked.pred, '/')+1:], a.parked.predRev)
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
}

func exploreMode() exploreConfig {
	if *exploreLong || os.Getenv("LEASEGATE_EXPLORE") == "long" {
		return exploreConfig{schedules: 10000, workers: 2}
	}
	return exploreConfig{schedules: 1000, workers: 2}
}

// TestExplore runs the explorer: the quick mode by default, the long mode
// with LEASEGATE_EXPLORE=long, one schedule with -explore.seed.
func TestExplore(t *testing.T) { explore(t, (*world).cast, 1) }

// explore runs the mode's schedules (divided by share) of cast's actors.
func explore(t *testing.T, cast func(*world), share int) {
	cfg := exploreMode()
	cfg.schedules /= share
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
				n, err := runScheduleWith(t, seed, cast)
				steps.Add(int64(n))
				if err != nil {
					failed.Add(1)
					t.Errorf("schedule seed %d failed (replay: go test ./queue -run %s -explore.seed %d -v):\n%v", seed, t.Name(), seed, err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("explorer: %d schedules, %d steps, %d violations, in %s",
		min(int(next.Load()), cfg.schedules), steps.Load(), failed.Load(), time.Since(began).Round(time.Millisecond))
}

// runScheduleWith runs one seeded schedule of the actors cast picks and
// returns its step count.
func runScheduleWith(t *testing.T, seed uint64, cast func(*world)) (int, error) {
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
	for i := 0; i < 2; i++ {
		c, err := dial()
		if err != nil {
			return 0, err
		}
		cfg := DefaultConfig()
		cfg.Prefix = prefix
		cfg.Clock = clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		cfg.AttemptTTL = 60 * time.Second
		e, err := New(c, cfg)
		if err != nil {
			return 0, err
		}
		e.hooks = sch
		engines = append(engines, e)
	}
	w := newWorld(sch, engines, prefix, seed)
	defer func() {
		w.cancelAll()
		for _, f := range w.after {
			f()
		}
		for _, e := range engines {
			e.Close()
		}
	}()
	cast(w)
	err = w.run()
	if err != nil {
		return len(sch.steps), fmt.Errorf("%v\nactors: %s\nsteps: %s", err, strings.Join(w.castNames(), ", "), sch.trace())
	}
	return len(sch.steps), nil
}
