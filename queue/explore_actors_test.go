package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
)

// world is one schedule's actors of one key space, the lock name they
// contend for and what the checkers know of their beliefs. A schedule
// runs one world, or several on the same engines, each in a key space of
// its own (TestExploreTenants).
type world struct {
	sch     *scheduler
	engines []*Engine // the gateways, acting in the world's key space
	prefix  string    // the engines' own prefix: every world's keys are under it
	name    string
	rng     *rand.Rand
	// tag begins the scheduler's names of the world's actors: a schedule's
	// worlds may cast actors of the same names (clients and request ids
	// alike), which the scheduler must tell apart.
	tag string
	// peers are the schedule's worlds, this one among them.
	peers []*world
	// election is set when name is an election's (ElectionName): every
	// holder proclaims before it lets go, and the checker follows values.
	election   bool
	proclaimed map[int64]string // by create revision: the value a holder proclaimed
	// limit is the semaphore limit the world's actors acquire with; 0 or
	// 1 is a lock.
	limit int

	specs []actorSpec
	wg    sync.WaitGroup
	clock *clock.Fake

	mu         sync.Mutex
	holding    map[string]Grant // by client: the grant it believes it holds
	limitOf    map[int64]int    // the limit each granted key was acquired with, by create revision (granted ones only)
	expiredRev map[int64]int    // create revisions of keys whose lease a nemesis revoked (or an evictor evicts): how many marked each
	// earlyUntil are the keys whose lease etcd revoked early, under holders
	// that rightly go on believing until the time given (fake time): their
	// grant's TTL after the revocation.
	earlyUntil map[int64]time.Time
	clocks     []*clock.Fake // the engines' clocks: time passes only when nothing else can happen
	delayEnd   time.Time     // no grant before this: an expired holder's lock-delay (fake time)…
	delayRev   int64         // …that rests on etcd's state after this revision, the expiry's
	lastToken  int64
	lastRev    int64
	grants     int
	violations []string
	cancels    map[string]context.CancelCauseFunc
	killed     map[string]bool
	ctxs       []context.CancelFunc
	after      []func() // run once the schedule has ended
	// leases are what the schedule's worlds know of pooled leases, which
	// every world's acquires share.
	leases *leaseBook
	// leftForTTL are the leases callers that vanished left holding (a
	// lock they could not release, a session they could not close): the
	// end of a run expires them, as their TTL would.
	leftForTTL []clientv3.LeaseID
	// keysSeen are the name's keys (create and mod revisions) check last
	// read, keysViewed those checkViews last judged: the views are judged
	// again only when the keys changed. Both are run's alone.
	keysSeen, keysViewed string
}

// actorSpec is one actor of a schedule.
type actorSpec struct {
	name   string
	client string // the holder identity beliefs are tracked by
	run    func(ctx context.Context)
	// mayVanish lets the schedule make its caller go away mid-call.
	mayVanish bool
}

func newWorld(sch *scheduler, engines []*Engine, prefix string, seed uint64) *world {
	return &world{
		sch: sch, engines: engines, prefix: prefix, name: "n",
		rng:     rand.New(rand.NewPCG(seed, 0xac7025)),
		holding: map[string]Grant{}, expiredRev: map[int64]int{}, earlyUntil: map[int64]time.Time{}, proclaimed: map[int64]string{}, limitOf: map[int64]int{},
		cancels: map[string]context.CancelCauseFunc{}, killed: map[string]bool{},
		leases: &leaseBook{takenAt: map[clientv3.LeaseID]int64{}},
	}
}

// leaseBook is, per lease, the etcd revision when an acquire last took it
// from a pool: a key created before it no longer owns the lease.
type leaseBook struct {
	mu      sync.Mutex
	takenAt map[clientv3.LeaseID]int64
}

func (w *world) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

// step is a script-level interleaving point.
func (w *world) step(ctx context.Context, label string) { w.sch.at(ctx, "actor."+label) }

func (w *world) engine() *Engine { return w.engines[w.rng.IntN(len(w.engines))] }

// cast picks two to four actors, always including at least one that takes
// the lock, from the menu below.
func (w *world) cast() {
	menu := []func(i int){
		func(i int) { w.add(w.holder(fmt.Sprintf("h%d", i), false)) },
		func(i int) { w.add(w.holder(fmt.Sprintf("s%d", i), true)) },
		func(i int) { w.add(w.reacquirer(fmt.Sprintf("r%d", i))) },
		func(i int) { w.addRetrier(fmt.Sprintf("a%d", i)) },
		func(i int) { w.add(w.undelivered(fmt.Sprintf("u%d", i))) },
		func(i int) { w.addImpatient(fmt.Sprintf("i%d", i)) },
		func(i int) { w.add(w.adversary(fmt.Sprintf("x%d", i))) },
		func(i int) { w.add(w.expirer(fmt.Sprintf("e%d", i))) },
		func(i int) { w.addGhost(fmt.Sprintf("g%d", i)) },
		func(i int) { w.add(w.reenterer(fmt.Sprintf("re%d", i))) },
		func(i int) { w.add(w.delayer(fmt.Sprintf("d%d", i))) },
		func(i int) { w.add(w.earlyRevoker(fmt.Sprintf("v%d", i))) },
		func(i int) { w.addQuitter(fmt.Sprintf("q%d", i)) },
		func(i int) { w.addSettler(fmt.Sprintf("t%d", i)) },
	}
	if w.limit > 1 {
		// A semaphore: limit+1 takers, so that one of them must wait,
		// and up to two more from the menu or one with another limit.
		menu = append(menu, func(i int) { w.add(w.mismatcher(fmt.Sprintf("m%d", i))) })
		i := 0
		for ; i <= w.limit; i++ {
			menu[w.rng.IntN(4)](i)
		}
		for n := i + w.rng.IntN(3); i < n; i++ {
			menu[w.rng.IntN(len(menu))](i)
		}
		return
	}
	if w.rng.IntN(3) == 0 {
		// An election: the same queue under an election's name, and every
		// leader proclaims before it resigns.
		w.name, w.election = ElectionName(w.name), true
	}
	stale := func(i int) { w.addStale(fmt.Sprintf("y%d", i)) }
	menu = append(menu, stale, func(i int) { w.add(w.poolExpirer(fmt.Sprintf("p%d", i))) })
	n := 2 + w.rng.IntN(3)
	if w.rng.IntN(4) == 0 {
		stale(0)
	} else {
		menu[w.rng.IntN(4)](0) // a lock taker first
	}
	for i := 1; i < n; i++ {
		menu[w.rng.IntN(len(menu))](i)
	}
	w.add(w.ticker("k"))
}

func (w *world) add(s actorSpec) { w.specs = append(w.specs, s) }

// actor is the scheduler's name of the world's actor called name.
func (w *world) actor(name string) string { return w.tag + name }

func (w *world) castNames() []string {
	var out []string
	for _, s := range w.specs {
		out = append(out, w.actor(s.name))
	}
	return out
}

func (w *world) request(client, rid string) AcquireRequest {
	return AcquireRequest{Name: w.name, TTL: 10 * time.Minute, Owner: "owner-" + client, ClientID: client, RequestID: rid, Limit: w.limit}
}

// believe records that client was told it holds g. A grant whose lease an
// expirer revoked before it arrived is not believed: a revocation stands
// for an expiry, which comes only after the grant's conservative deadline
// (measured from before the request was sent), so a client would find the
// grant already past its deadline and let it go, as the SDK does.
func (w *world) believe(client string, g Grant) bool {
	c := w.cert(g)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.expiredRev[g.Revision] > 0 {
		return false
	}
	w.grants++
	if now := w.clocks[0].Now(); now.Before(w.delayEnd) && c.heldFrom >= w.delayRev {
		// A grant whose slot was earned after the expiry. A semaphore's
		// holder that held its slot before it — granted later, after its
		// session move or its lease's renewal — is not the expired slot's;
		// a lock's first key after the expiry is always later than it.
		w.violations = append(w.violations, fmt.Sprintf("%s granted at %s, before an expired holder's lock-delay ended at %s",
			client, now.Format("15:04:05.000"), w.delayEnd.Format("15:04:05.000")))
	}
	tok := g.Token()
	switch {
	case w.limit > 1:
		// A semaphore's holders are granted in any order among themselves.
	case tok < w.lastToken:
		w.violations = append(w.violations, fmt.Sprintf("%s granted token %d after token %d", client, tok, w.lastToken))
	case tok == w.lastToken && g.Revision != w.lastRev:
		w.violations = append(w.violations, fmt.Sprintf("%s granted token %d again for another key", client, tok))
	}
	w.lastToken, w.lastRev = tok, g.Revision
	w.holding[client] = g
	return true
}

// disbelieve lets go of a grant its client does not believe (believe), as
// the SDK releases a grant it finds past its deadline: a lease that really
// ended leaves the release nothing to do, and one marked ended by an
// evictor that vanished before it evicted is freed, not left holding the
// name for its whole TTL. A client gone first leaves the lease to lapse.
func (w *world) disbelieve(ctx context.Context, e *Engine, g Grant) {
	if _, err := e.Release(ctx, g.Handle, g.Token()); err != nil && ctx.Err() != nil && !g.Session {
		w.leftHeld(g.Lease)
	}
}

// letGo records that client no longer believes it holds.
func (w *world) letGo(client string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.holding, client)
}

// release lets client's grant go; in an election, the leader proclaims
// first.
func (w *world) release(ctx context.Context, client string, e *Engine, g Grant) {
	if w.election {
		w.proclaim(ctx, client, e, g)
	}
	w.step(ctx, "release")
	w.letGo(client)
	_, err := e.Release(ctx, g.Handle, g.Token())
	switch {
	case err == nil && w.lostAnswer(ctx):
		// The answer was lost: the release again drops nothing.
		if again, err := e.Release(ctx, g.Handle, g.Token()); again || err != nil && ctx.Err() == nil {
			w.violate("%s: release retried after a lost answer = %v, %v; want false, nil", client, again, err)
		}
	case ctx.Err() != nil:
		w.leftHeld(g.Lease) // gone before its release: the lease ends it
	case err != nil && !errors.Is(err, ErrNotOwner):
		w.violate("%s: release: %v", client, err)
	}
}

// lostAnswer draws whether a call's answer is lost on its way to the
// caller, who then sends it again (the SDK retries with the same request).
func (w *world) lostAnswer(ctx context.Context) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return ctx.Err() == nil && w.rng.IntN(3) == 0
}

// proclaim publishes a value for client's term. It must succeed unless an
// expirer ended the term.
func (w *world) proclaim(ctx context.Context, client string, e *Engine, g Grant) {
	w.step(ctx, "proclaim")
	v := fmt.Sprintf("%s@%d", client, g.Token())
	err := e.Proclaim(ctx, g.Handle, []byte(v))
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
		w.proclaimed[g.Revision] = v
	case ctx.Err() != nil:
	case (w.expiredRev[g.Revision] > 0 || !w.earlyUntil[g.Revision].IsZero()) && errors.Is(err, ErrNotLeader):
	default:
		w.violations = append(w.violations, fmt.Sprintf("%s: proclaim while leading: %v", client, err))
	}
}

// acquire runs one Acquire of r on e and reports the grant, or nil.
func (w *world) acquire(ctx context.Context, who string, e *Engine, r AcquireRequest) (*Grant, error) {
	wt, err := e.Enqueue(ctx, r)
	if err != nil {
		return nil, err
	}
	g, err := wt.Wait(ctx)
	if err != nil {
		return nil, err
	}
	out := w.granted(who, g, r)
	return w.delivered(ctx, e, out)
}

// delivered hands g to its caller, unless the caller went away: then the
// grant reaches nobody and is given up, as a gateway gives up a grant it
// cannot send.
func (w *world) delivered(ctx context.Context, e *Engine, g *Grant) (*Grant, error) {
	if err := ctx.Err(); err != nil {
		w.abandon(ctx, e, *g)
		return nil, err
	}
	return g, nil
}

// abandon gives g up on e, as a gateway whose caller is gone does. A grant
// of a key taken over after it was granted gives nothing up (its end is its
// lease's): its lease is left for the end of the run to expire.
func (w *world) abandon(ctx context.Context, e *Engine, g Grant) {
	e.Abandon(ctx, g)
	if g.keep {
		w.leftHeld(g.Lease)
	}
}

// leftHeld notes a lease a vanished caller left holding, for the end of
// the run to expire.
func (w *world) leftHeld(id clientv3.LeaseID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leftForTTL = append(w.leftForTTL, id)
}

// granted records a grant of r's limit and certifies it.
func (w *world) granted(who string, g Grant, r AcquireRequest) *Grant {
	w.mu.Lock()
	w.limitOf[g.Revision] = max(r.Limit, 1)
	w.mu.Unlock()
	w.certify(who, g)
	return &g
}

// tryAcquire is acquire without waiting: nil and no error when the name
// is not free.
func (w *world) tryAcquire(ctx context.Context, who string, e *Engine, r AcquireRequest) (*Grant, error) {
	res, err := e.TryAcquire(ctx, r)
	if err != nil || !res.Acquired {
		return nil, err
	}
	return w.delivered(ctx, e, w.granted(who, res.Grant, r))
}

// cert is what the engine said g rests on; a grant it never reported is a
// violation.
func (w *world) cert(g Grant) grantCert {
	c, ok := w.sch.cert(g)
	if !ok {
		w.violate("a grant (token %d, attempt %d) the engine never reported", g.Token(), g.attempt)
	}
	return c
}

// certify checks what every grant rests on, whoever receives it (a zombie
// attempt's grant too): at the revision the engine says it knew the key
// first (its certificate's asOf), etcd had the key with the grant's
// identity, carrying the granting attempt's write, and no key created
// before it.
func (w *world) certify(who string, g Grant) {
	asOf := w.cert(g).asOf
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := w.engines[0].keys.namePrefix(w.name)
	resp, err := w.sch.cli.Txn(ctx).Then(
		clientv3.OpGet(prefix+g.WaiterID, clientv3.WithKeysOnly(), clientv3.WithRev(asOf)),
		clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithRev(asOf))).Commit()
	if err != nil {
		w.violate("%s: certify grant at %d: %v", who, asOf, err)
		return
	}
	own, first := firstKV(resp.Responses[0]), firstKV(resp.Responses[1])
	w.mu.Lock()
	n := w.limitOf[g.Revision]
	if n == 0 {
		n = w.limit // a grant that reached no client: the world's limit
	}
	w.mu.Unlock()
	if n > 1 {
		// A semaphore's grant: fewer than n keys ahead, all of limit n.
		var ahead []*mvccpb.KeyValue
		for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
			if kv.CreateRevision < g.Revision {
				ahead = append(ahead, kv)
			}
		}
		if len(ahead) >= n {
			w.violate("%s granted (token %d, limit %d) as of revision %d, when %d keys were ahead", who, g.Token(), n, asOf, len(ahead))
		}
		for _, kv := range ahead {
			if m, _ := decodeValue(kv.Value); max(m.Limit, 1) != n {
				w.violate("%s granted (token %d, limit %d) as of revision %d, when a key of limit %d was ahead", who, g.Token(), n, asOf, m.Limit)
			}
		}
		first = own // the first-key test below is a lock's
	}
	switch {
	case own == nil || own.CreateRevision != g.Revision:
		w.violate("%s granted (token %d) as of revision %d, when its key was not there", who, g.Token(), asOf)
	case own.ModRevision != g.attempt:
		w.violate("%s granted (token %d) as of revision %d, when its key carried another attempt's write (%d, not %d)", who, g.Token(), asOf, own.ModRevision, g.attempt)
	case first == nil || first.CreateRevision != g.Revision:
		w.violate("%s granted (token %d) as of revision %d, when a key created at %d was ahead", who, g.Token(), asOf, first.GetCreateRevision())
	}
}

// expectedEnd reports the errors of a wait that ends without a grant by
// an actor's own doing, a nemesis's or another limit's. Only an attempt its client gave up
// may be superseded: a live attempt superseded by an older one is a lost
// acquire.
func expectedEnd(err error) bool {
	// A semaphore world's mismatcher may hold the name under its own
	// limit, and then every other acquire is refused.
	return errors.Is(err, context.Canceled) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrSessionLost) ||
		errors.Is(err, ErrLimitMismatch)
}

// zombieEnd is expectedEnd for an attempt whose client has given up.
func zombieEnd(err error) bool { return expectedEnd(err) || errors.Is(err, ErrSuperseded) }

// openSession opens a session on e for an actor's request r, at a step of
// its own, and returns the func that closes it (at another step).
func (w *world) openSession(ctx context.Context, e *Engine, name string, r *AcquireRequest) (func(), bool) {
	w.step(ctx, "open-session")
	s, err := e.OpenSession(ctx, name, 10*time.Minute)
	if err != nil {
		if ctx.Err() == nil {
			w.violate("%s: open session: %v", name, err)
		} else if s.Lease != 0 {
			w.leftHeld(s.Lease)
		}
		return nil, false
	}
	r.Session, r.SessionSecret = s.Lease, s.Secret
	return func() {
		w.step(ctx, "close-session")
		if err := e.CloseSession(ctx, s.Lease, s.Secret); err != nil {
			w.leftHeld(s.Lease) // its caller went: the session's TTL ends it
		}
	}, true
}

// holder takes the lock (with a lease of its own or in a session) and
// lets it go.
func (w *world) holder(name string, session bool) actorSpec {
	e := w.engine()
	return actorSpec{name: name, client: name, mayVanish: true, run: func(ctx context.Context) {
		r := w.request(name, name+"-req")
		if session {
			closeSession, ok := w.openSession(ctx, e, name, &r)
			if !ok {
				return
			}
			defer closeSession()
		}
		w.step(ctx, "acquire")
		g, err := w.acquire(ctx, name, e, r)
		if err == nil && w.lostAnswer(ctx) {
			// The grant's answer was lost: the same request again, on
			// either gateway, is the same grant.
			first := g
			w.step(ctx, "acquire-retry")
			if g, err = w.acquire(ctx, name, w.engine(), r); err == nil && (g.Revision != first.Revision || !g.Resumed) && !w.expired(first.Revision) {
				w.violate("%s: acquire retried after a lost answer got token %d (resumed %v); want the first grant's %d", name, g.Token(), g.Resumed, first.Token())
			}
			if err != nil && !session {
				// Gone before any answer came: the first grant, which it
				// never learned of, ends with its lease.
				w.leftHeld(first.Lease)
			}
		}
		if err != nil {
			if !expectedEnd(err) && !errors.Is(err, ErrSuperseded) {
				w.violate("%s: acquire: %v", name, err)
			}
			return
		}
		if !w.believe(name, *g) {
			w.disbelieve(ctx, e, *g)
			return
		}
		if !session && w.lostAnswer(ctx) {
			// A renewal, and the same renewal again after a lost answer.
			w.step(ctx, "renew")
			for i := 0; i < 2 && ctx.Err() == nil; i++ {
				if _, err := e.Renew(ctx, g.Handle, g.Token()); err != nil && ctx.Err() == nil && !w.expired(g.Revision) {
					w.violate("%s: renew %d of a held lock: %v", name, i+1, err)
				}
			}
		}
		w.release(ctx, name, e, *g)
	}}
}

// expired reports whether a nemesis ended the key created at rev.
func (w *world) expired(rev int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.expiredRev[rev] > 0 || !w.earlyUntil[rev].IsZero()
}

// reacquirer takes and lets go of the lock twice with one stable request
// id and no hold time: the predecessor-ABA client. Half of them lose the
// first grant behind their back instead of releasing it (etcd revokes its
// lease early), believe on in it for its TTL, and acquire again with the
// same request id: the new grant must wait out the old belief.
func (w *world) reacquirer(name string) actorSpec {
	e := w.engine()
	lose := w.rng.IntN(2) == 0
	return actorSpec{name: name, client: name, mayVanish: true, run: func(ctx context.Context) {
		r := w.request(name, name+"-stable")
		for i := 0; i < 2; i++ {
			w.step(ctx, "acquire")
			g, err := w.acquire(ctx, name, e, r)
			if err != nil {
				if !expectedEnd(err) {
					w.violate("%s: acquire %d: %v", name, i, err)
				}
				return
			}
			if !w.believe(name, *g) {
				w.disbelieve(ctx, e, *g)
				return
			}
			if i == 0 && lose {
				w.step(ctx, "lose")
				if w.loseEarly(ctx, name, *g) {
					continue
				}
			}
			w.release(ctx, name, e, *g)
		}
	}}
}

// loseEarly revokes the lease of client's grant g as an etcd leader
// resuming from a stall would: client believes on in g for its TTL, under
// a name of its own, while it goes on as a new caller. It reports false
// when the lease could not be revoked (the caller vanished meanwhile).
func (w *world) loseEarly(ctx context.Context, client string, g Grant) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Under w.mu: no grant is believed between the revocation and the
	// note of the belief that outlives it.
	if _, err := w.sch.cli.Revoke(ctx, g.Lease); err != nil {
		return false
	}
	w.earlyUntil[g.Revision] = w.clocks[0].Now().Add(g.TTL)
	if w.holding[client].Revision == g.Revision {
		delete(w.holding, client)
		w.holding[client+"(lost)"] = g
	}
	return true
}

// addRetrier adds a client whose stream dies at a moment the scheduler
// picks (the killer actor), and that retries with the same request id on
// the other gateway. A grant made after the stream died never reaches it:
// the first gateway gives it up.
func (w *world) addRetrier(name string) {
	first, second := w.engines[0], w.engines[1]
	if w.rng.IntN(2) == 0 {
		first, second = second, first
	}
	session := w.rng.IntN(2) == 0
	w.add(actorSpec{name: name, client: name, run: func(ctx context.Context) {
		r := w.request(name, name+"-req")
		if session {
			closeSession, ok := w.openSession(ctx, first, name, &r)
			if !ok {
				return
			}
			defer closeSession()
		}
		actx, cancel := context.WithCancelCause(ctx)
		w.mu.Lock()
		w.cancels[name] = cancel
		w.mu.Unlock()
		w.step(ctx, "acquire")
		g, err := w.acquire(actx, name, first, r)
		w.mu.Lock()
		killed := w.killed[name]
		delete(w.cancels, name) // a kill from now on has no attempt to end
		w.mu.Unlock()
		switch {
		case err == nil && !killed:
			w.believe(name, *g)
			w.release(ctx, name, first, *g)
			return
		case err == nil:
			w.abandon(ctx, first, *g) // the stream broke before the grant went out
		case !zombieEnd(err):
			w.violate("%s: first attempt: %v", name, err)
			return
		}
		w.step(ctx, "retry")
		g, err = w.acquire(ctx, name, second, r)
		if err != nil {
			if !expectedEnd(err) {
				w.violate("%s: retry: %v", name, err)
			}
			return
		}
		w.believe(name, *g)
		w.release(ctx, name, second, *g)
	}})
	w.add(actorSpec{name: name + "-kill", run: func(ctx context.Context) {
		w.step(ctx, "kill "+name)
		w.mu.Lock()
		w.killed[name] = true
		cancel := w.cancels[name]
		w.mu.Unlock()
		if cancel != nil {
			cancel(context.Canceled)
			w.sch.markWake(w.actor(name))
		}
	}})
}

// addQuitter adds a waiter that gives up at a moment the scheduler picks
// (its caller's wait timed out, its stream broke) and does not come back:
// perhaps in the middle of waiting out a lost holder's belief, which the
// waiters behind it must then wait out in its stead.
func (w *world) addQuitter(name string) {
	e := w.engine()
	actx, cancel := context.WithCancelCause(withActor(context.Background(), w.actor(name)))
	var delivered, quit bool
	w.add(actorSpec{name: name, client: name, run: func(ctx context.Context) {
		defer cancel(nil)
		w.step(ctx, "acquire")
		g, err := w.acquire(actx, name, e, w.request(name, name+"-req"))
		w.mu.Lock()
		gone := quit
		delivered = err == nil && !gone
		w.mu.Unlock()
		switch {
		case err == nil && !gone:
			if w.believe(name, *g) {
				w.release(ctx, name, e, *g)
			}
		case err == nil:
			w.abandon(ctx, e, *g) // it quit: nobody receives the grant
		case !expectedEnd(err):
			w.violate("%s: acquire: %v", name, err)
		}
	}})
	w.add(actorSpec{name: name + "-quit", run: func(ctx context.Context) {
		w.step(ctx, "quit "+name)
		w.mu.Lock()
		if delivered {
			w.mu.Unlock()
			return
		}
		quit = true
		w.mu.Unlock()
		cancel(context.Canceled)
		w.sch.markWake(w.actor(name))
	}})
}

// undelivered is granted, but its stream breaks as the grant is sent: the
// gateway gives the grant up.
func (w *world) undelivered(name string) actorSpec {
	e := w.engine()
	return actorSpec{name: name, client: name, run: func(ctx context.Context) {
		w.step(ctx, "acquire")
		g, err := w.acquire(ctx, name, e, w.request(name, name+"-req"))
		if err != nil {
			if !expectedEnd(err) {
				w.violate("%s: acquire: %v", name, err)
			}
			return
		}
		w.abandon(ctx, e, *g)
	}}
}

// addImpatient adds a client that gives up on its first attempt (its
// stream dies at a moment the scheduler picks) and at once retries with the
// same request id on the other gateway, while the first attempt may still
// run there: the first attempt's grant, if any, reaches nobody.
func (w *world) addImpatient(name string) {
	first, second, r, ok := w.twoGateways(name)
	if !ok {
		return
	}
	w.addKilled(name, first, r, w.retrier(name, second, r))
}

// addKilled adds a client's first attempt of r on first, and an actor that
// kills it (its stream dies) at a moment the scheduler picks, unless it was
// delivered, and then starts next, what the client does about it. A grant
// the killed attempt is given reaches nobody.
func (w *world) addKilled(name string, first *Engine, r AcquireRequest, next actorSpec) {
	var delivered, killed bool
	actx, cancel := context.WithCancelCause(withActor(context.Background(), w.actor(name)))
	w.add(actorSpec{name: name, client: name, run: func(ctx context.Context) {
		defer cancel(nil)
		w.step(ctx, "acquire")
		g, err := w.acquire(actx, name, first, r)
		w.mu.Lock()
		gone := killed
		if err == nil && !gone {
			delivered = true
		}
		w.mu.Unlock()
		switch {
		case err == nil && !gone:
			w.believe(name, *g)
			w.release(ctx, name, first, *g)
		case err == nil:
			w.abandon(ctx, first, *g) // the stream is gone: nobody receives it
		case gone && !zombieEnd(err), !gone && !expectedEnd(err):
			w.violate("%s: first attempt: %v", name, err)
		}
	}})
	w.add(actorSpec{name: name + "-kill", run: func(ctx context.Context) {
		w.step(ctx, "kill "+name)
		w.mu.Lock()
		if delivered {
			w.mu.Unlock()
			return
		}
		killed = true
		w.mu.Unlock()
		cancel(context.Canceled)
		w.sch.markWake(w.actor(name))
		w.start(next)
	}})
}

// addSettler adds a client that gives up on its first attempt (its stream
// dies at a moment the scheduler picks) and then, as the SDK settles a
// session acquire whose answer was lost, asks the other gateway for the
// grant made under its request id (Existing) and releases what it is
// handed. Existing writes nothing and answers only a grant — the key there
// and first (within the limit), carrying the write of the attempt that
// holds it, outside every pending lock-delay — and only the request's
// own caller's.
func (w *world) addSettler(name string) {
	first, second, r, ok := w.twoGateways(name)
	if !ok {
		return
	}
	settle := actorSpec{name: name + "-settle", client: name, run: func(ctx context.Context) {
		w.step(ctx, "existing")
		g, found, err := second.Existing(ctx, r)
		if err != nil || !found {
			if err != nil && ctx.Err() == nil {
				w.violate("%s: existing: %v", name, err)
			}
			return
		}
		w.certify(name+" (existing)", g)
		c := w.cert(g)
		w.mu.Lock()
		if now := w.clocks[0].Now(); now.Before(w.delayEnd) && c.heldFrom >= w.delayRev {
			w.violations = append(w.violations, fmt.Sprintf("%s: existing answered a grant at %s, before an expired holder's lock-delay ended at %s",
				name, now.Format("15:04:05.000"), w.delayEnd.Format("15:04:05.000")))
		}
		w.mu.Unlock()
		w.step(ctx, "release")
		if _, err := second.Release(ctx, g.Handle, g.Token()); err != nil && !errors.Is(err, ErrNotOwner) && ctx.Err() == nil {
			w.violate("%s: release of the grant existing found: %v", name, err)
		}
	}}
	w.addKilled(name, first, r, settle)
}

// twoGateways picks the gateway a client's first attempt runs on and the
// one it retries on, and its request: half the time a session lock, whose
// session is opened before the schedule starts and closed after it ends.
func (w *world) twoGateways(name string) (first, second *Engine, r AcquireRequest, ok bool) {
	first, second = w.engines[0], w.engines[1]
	if w.rng.IntN(2) == 0 {
		first, second = second, first
	}
	r = w.request(name, name+"-req")
	if w.rng.IntN(2) == 0 {
		s, err := first.OpenSession(context.Background(), name, 10*time.Minute)
		if err != nil {
			w.violate("%s: open session: %v", name, err)
			return nil, nil, r, false
		}
		w.after = append(w.after, func() { _ = first.CloseSession(context.Background(), s.Lease, s.Secret) })
		r.Session, r.SessionSecret = s.Lease, s.Secret
	}
	return first, second, r, true
}

// retrier is a client's retry of r on e, started by another actor.
func (w *world) retrier(name string, e *Engine, r AcquireRequest) actorSpec {
	return actorSpec{name: name + "-retry", client: name, run: func(ctx context.Context) {
		w.step(ctx, "retry")
		g, err := w.acquire(ctx, name, e, r)
		if err != nil {
			if !expectedEnd(err) {
				w.violate("%s: retry: %v", name, err)
			}
			return
		}
		w.believe(name, *g)
		w.release(ctx, name, e, *g)
	}}
}

// addGhost adds a client whose stream dies unnoticed once it has
// enqueued: its first attempt goes on waiting on one gateway (nothing
// cancels it) while, at a moment the scheduler picks, the client retries
// with the same request id on the other and takes the waiter over. From
// then on the first attempt owns nothing: it must end superseded, and a
// grant it was given before the takeover reaches nobody and is given up.
func (w *world) addGhost(name string) {
	first, second, r, ok := w.twoGateways(name)
	if !ok {
		return
	}
	retry := w.retrier(name, second, r)
	w.add(actorSpec{name: name, run: func(ctx context.Context) {
		w.step(ctx, "acquire")
		wt, err := first.Enqueue(ctx, r)
		if err != nil {
			if !expectedEnd(err) {
				w.violate("%s: enqueue: %v", name, err)
			}
			return
		}
		// The stream dies once the attempt has enqueued; the retry goes
		// when the scheduler picks it.
		w.start(retry)
		g, err := wt.Wait(ctx)
		switch {
		case err == nil:
			w.certify(name+" (unnoticed)", g)
			w.abandon(ctx, first, g) // its stream is gone: nobody receives it
		case !zombieEnd(err):
			w.violate("%s: the unnoticed attempt: %v", name, err)
		}
	}})
}

// adversary holds a lock of its own on another name and, at moments the
// scheduler picks, tries to free the contended name's holder with its own
// lock id edited to carry the holder's lease, and to take over waiters by
// their request ids.
func (w *world) adversary(name string) actorSpec {
	e := w.engine()
	return actorSpec{name: name, client: name, run: func(ctx context.Context) {
		own := AcquireRequest{Name: w.name + "-adv", TTL: 10 * time.Minute, Owner: "mallory", ClientID: name, RequestID: name + "-own"}
		w.step(ctx, "own")
		mine, err := acquire(ctx, e, own)
		if err != nil {
			w.violate("%s: own lock: %v", name, err)
			return
		}
		for i := 0; i < 2; i++ {
			w.step(ctx, "attack")
			w.mu.Lock()
			var victims []Grant
			var clients []string
			for c, g := range w.holding {
				victims, clients = append(victims, g), append(clients, c)
			}
			w.mu.Unlock()
			for j, v := range victims {
				forged := mine.Handle
				forged.Lease = v.Lease
				if ok, err := e.Release(ctx, forged, mine.Token()); ok || !errors.Is(err, ErrNotOwner) {
					w.violate("%s: release of its own lock id with %s's lease = %v, %v; want ErrNotOwner", name, clients[j], ok, err)
				}
				if w.election {
					// The leader's key, named with the adversary's own
					// secret: the value must not change hands. (The term
					// may have ended since the snapshot: ErrNotLeader.)
					stolen := v.Handle
					stolen.Secret = mine.Secret
					if err := e.Proclaim(ctx, stolen, []byte("mallory")); !errors.Is(err, ErrNotOwner) && !errors.Is(err, ErrNotLeader) {
						w.violate("%s: proclaim for %s with its own secret = %v; want ErrNotOwner", name, clients[j], err)
					}
				}
			}
			// Another caller's request ids, as guessed, while its waiter
			// exists: the waiter must not be handed over.
			for _, s := range w.specs {
				if s.client == "" || s.client == name {
					continue
				}
				for _, rid := range []string{s.client + "-req", s.client + "-stable"} {
					key := e.keys.waiter(w.name, WaiterID(rid))
					if resp, err := w.sch.cli.Get(ctx, key, clientv3.WithCountOnly()); err != nil || resp.Count == 0 {
						continue
					}
					r := w.request(s.client, rid)
					r.Owner = "mallory"
					// Resume never creates a key: it takes over an
					// existing one or finds none (the waiter may have
					// gone since the read above).
					if wt, err := e.Resume(ctx, r); wt != nil || err != nil && !errors.Is(err, ErrNotOwner) {
						w.violate("%s: resume with %s's request id = %v, %v; want ErrNotOwner or nothing", name, s.client, wt != nil, err)
					}
					// Nor is its grant read out by asking for it.
					if _, found, err := e.Existing(ctx, r); found || err != nil && !errors.Is(err, ErrNotOwner) && ctx.Err() == nil {
						w.violate("%s: existing with %s's request id = %v, %v; want ErrNotOwner or nothing", name, s.client, found, err)
					}
				}
			}
		}
		w.step(ctx, "release-own")
		if _, err := e.Release(ctx, mine.Handle, mine.Token()); err != nil {
			w.violate("%s: release own: %v", name, err)
		}
	}}
}

// expirer revokes the lease of whatever key is first, as if etcd expired
// it: its holder or waiter must learn it lost, and nobody else may suffer.
// A revocation stands for an expiry, so whoever relied on that lease is
// past its deadline.
func (w *world) expirer(name string) actorSpec {
	return actorSpec{name: name, run: func(ctx context.Context) {
		w.step(ctx, "expire")
		resp, err := w.sch.cli.Get(ctx, w.engines[0].keys.namePrefix(w.name), clientv3.WithFirstCreate()...)
		if err != nil || len(resp.Kvs) == 0 {
			return
		}
		w.expire(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	}}
}

// earlyRevoker revokes the lease of the first key while its holder
// believes it holds, as an etcd leader resuming from a stall revokes by its
// stale clock a lease the new leader renewed: the holder goes on believing
// for its grant's TTL, and nobody else may be granted the name meanwhile.
func (w *world) earlyRevoker(name string) actorSpec {
	return actorSpec{name: name, run: func(ctx context.Context) {
		w.step(ctx, "revoke-early")
		resp, err := w.sch.cli.Get(ctx, w.engines[0].keys.namePrefix(w.name), clientv3.WithFirstCreate()...)
		if err != nil || len(resp.Kvs) == 0 {
			return
		}
		first := resp.Kvs[0]
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, g := range w.holding {
			if g.Revision == first.CreateRevision {
				// Under w.mu: no grant is believed between the revocation
				// and the note of its holder's belief.
				if _, err := w.sch.cli.Revoke(ctx, g.Lease); err == nil {
					w.earlyUntil[g.Revision] = w.clocks[0].Now().Add(g.TTL)
				}
				return
			}
		}
	}}
}

// expire revokes lease as its expiry would end it, noting the keys it
// takes and, for a holder that asked for one, the lock-delay that starts,
// in the world whose key space each key is in: a lease (the attempt
// lease, a recycled one) may carry keys of several worlds.
func (w *world) expire(ctx context.Context, lease clientv3.LeaseID) {
	// Leases are not in keys-only answers: read the values too.
	all, err := w.sch.cli.Get(ctx, w.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return
	}
	peers := w.peers
	if len(peers) == 0 {
		peers = []*world{w}
	}
	// Every world's lock, always in the same order: no grant is believed
	// in any of them between the revocation and the note of its keys.
	for _, p := range peers {
		p.mu.Lock()
		defer p.mu.Unlock()
	}
	delayed := map[*world]bool{}
	for _, kv := range all.Kvs {
		if clientv3.LeaseID(kv.Lease) != lease {
			continue
		}
		for _, p := range peers {
			if !strings.HasPrefix(string(kv.Key), p.engines[0].keys.locks()) {
				continue
			}
			p.expiredRev[kv.CreateRevision]++
			if m, err := decodeValue(kv.Value); err == nil && m.Delay > 0 && p.limitOf[kv.CreateRevision] > 0 {
				// A holder that was granted expires now: nobody may be
				// granted before its lock-delay has passed. (A waiter
				// that expires before its grant was never told it held.)
				end := p.clocks[0].Now().Add(time.Duration(m.Delay) * time.Millisecond)
				if end.After(p.delayEnd) {
					p.delayEnd = end
				}
				delayed[p] = true
			}
		}
	}
	if resp, err := w.sch.cli.Revoke(ctx, lease); err == nil {
		for p := range delayed {
			p.delayRev = resp.Header.Revision
		}
	}
}

// mismatcher acquires the world's semaphore with another limit: it is
// refused while the name has keys, or holds the name under its own limit
// (which the others' acquires are then refused for). One in two tries
// instead (TryAcquire), which puts its key before it can see the name's
// limit and takes it back when refused.
func (w *world) mismatcher(name string) actorSpec {
	e := w.engine()
	try := w.rng.IntN(2) == 0
	return actorSpec{name: name, client: name, mayVanish: true, run: func(ctx context.Context) {
		r := w.request(name, name+"-req")
		r.Limit = w.limit + 1
		w.step(ctx, "acquire")
		var g *Grant
		var err error
		if try {
			g, err = w.tryAcquire(ctx, name, e, r)
		} else {
			g, err = w.acquire(ctx, name, e, r)
		}
		if g == nil && err == nil {
			return // not free
		}
		if err != nil {
			if !expectedEnd(err) && !errors.Is(err, ErrLimitMismatch) {
				w.violate("%s: acquire: %v", name, err)
			}
			return
		}
		w.believe(name, *g)
		w.release(ctx, name, e, *g)
	}}
}

// reenterer takes the lock re-entrant in a session, on one gateway, and
// re-enters it on either (or has the re-entered grant undelivered, given
// up); half the time it retries the re-entry with the same request id, as a
// client whose answer was lost does, and gets the same hold back. It lets
// its holds go in either order, and half the time repeats a release (a
// retry after a lost answer), which drops nothing more. It believes it
// holds until its last hold is released, and the name is free after it.
func (w *world) reenterer(name string) actorSpec {
	e1, e2 := w.engine(), w.engine()
	undelivered := w.rng.IntN(3) == 0
	retryEnter, retryRelease, innerFirst := w.rng.IntN(2) == 0, w.rng.IntN(2) == 0, w.rng.IntN(2) == 0
	return actorSpec{name: name, client: name, mayVanish: true, run: func(ctx context.Context) {
		r := w.request(name, name+"-1")
		closeSession, ok := w.openSession(ctx, e1, name, &r)
		if !ok {
			return
		}
		defer closeSession()
		r.Reentrant = true
		w.step(ctx, "acquire")
		g1, err := w.acquire(ctx, name, e1, r)
		if err != nil {
			if !expectedEnd(err) {
				w.violate("%s: acquire: %v", name, err)
			}
			return
		}
		if !w.believe(name, *g1) {
			w.disbelieve(ctx, e1, *g1)
			return
		}
		r2 := r
		r2.RequestID = name + "-2"
		w.step(ctx, "re-enter")
		g2, err := w.acquire(ctx, name, e2, r2)
		if err == nil && retryEnter {
			// The answer was lost: the same request again, on the other
			// gateway. The first answer reaches nobody.
			w.step(ctx, "re-enter-retry")
			again, rerr := w.acquire(ctx, name, e1, r2)
			switch {
			case rerr != nil:
				err = rerr
			case again.HoldID != g2.HoldID || again.Holds != 2:
				w.violate("%s: retried re-entry got hold %q with %d holds; want the same hold %q with 2", name, again.HoldID, again.Holds, g2.HoldID)
			}
			if rerr == nil {
				w.abandon(ctx, e2, *g2) // the lost answer's grant: given up, it must drop nothing
				g2 = again
			}
		}
		switch {
		case err != nil:
			if !expectedEnd(err) {
				w.violate("%s: re-enter: %v", name, err)
			}
			w.release(ctx, name, e1, *g1)
			return
		case g2.Revision != g1.Revision:
			w.mu.Lock()
			lost := w.expiredRev[g1.Revision] > 0 || !w.earlyUntil[g1.Revision].IsZero()
			w.mu.Unlock()
			if !lost {
				w.violate("%s: re-entrant acquire of its held lock (token %d) got another (token %d)", name, g1.Token(), g2.Token())
			}
			w.letGo(name)
			w.release(ctx, name, e2, *g2)
			return
		case g2.HoldID == "" || g2.Token() != g1.Token() || g2.Holds != 2:
			w.violate("%s: re-entered grant: hold %q, token %d (lock's %d), holds %d; want a hold of its own with the lock's token, 2 holds",
				name, g2.HoldID, g2.Token(), g1.Token(), g2.Holds)
		}
		if undelivered {
			w.abandon(ctx, e2, *g2) // the re-entered grant reaches nobody
			w.release(ctx, name, e1, *g1)
			return
		}
		first, second := *g1, *g2
		if innerFirst {
			first, second = second, first
		}
		w.step(ctx, "release-first")
		w.releaseHold(ctx, name, e2, first, false)
		if retryRelease {
			w.step(ctx, "release-first-again")
			w.releaseHold(ctx, name, e1, first, true)
		}
		w.release(ctx, name, e1, second)
		if retryRelease {
			w.step(ctx, "release-last-again")
			w.releaseHold(ctx, name, e2, second, true)
		}
	}}
}

// releaseHold releases one hold of client's while it holds another:
// released must be true the first time and false when repeated.
func (w *world) releaseHold(ctx context.Context, client string, e *Engine, g Grant, repeated bool) {
	ok, err := e.Release(ctx, g.Handle, g.Token())
	w.mu.Lock()
	lost := w.expiredRev[g.Revision] > 0 || !w.earlyUntil[g.Revision].IsZero()
	w.mu.Unlock()
	switch {
	case ctx.Err() != nil: // its caller went: the session's end frees the rest
	case err != nil && !errors.Is(err, ErrNotOwner):
		w.violate("%s: release of hold %q: %v", client, g.HoldID, err)
	case ok == repeated && !lost:
		w.violate("%s: release of hold %q (repeated %v) = %v", client, g.HoldID, repeated, ok)
	}
}

// delayer takes the lock with a lock-delay (with a lease of its own or in
// a session) and lets it go, or half the time dies holding it: its lease
// expires (is revoked), and nobody may be granted the name for the delay.
func (w *world) delayer(name string) actorSpec {
	e := w.engine()
	session, dies := w.rng.IntN(2) == 0, w.rng.IntN(2) == 0
	return actorSpec{name: name, client: name, mayVanish: true, run: func(ctx context.Context) {
		r := w.request(name, name+"-req")
		r.LockDelay = 30 * time.Second
		if session {
			closeSession, ok := w.openSession(ctx, e, name, &r)
			if !ok {
				return
			}
			defer closeSession()
		}
		w.step(ctx, "acquire")
		g, err := w.acquire(ctx, name, e, r)
		if err != nil {
			if !expectedEnd(err) {
				w.violate("%s: acquire: %v", name, err)
			}
			return
		}
		w.believe(name, *g)
		if dies {
			w.step(ctx, "die")
			w.expire(context.WithoutCancel(ctx), g.Lease) // its lease ends, whether its caller is there or not
			w.letGo(name)
			return
		}
		w.release(ctx, name, e, *g)
	}}
}

// start lets an actor go; it runs until its first point.
func (w *world) start(s actorSpec) {
	s.name = w.actor(s.name)
	ctx, cancel := context.WithCancel(withActor(context.Background(), s.name))
	w.mu.Lock()
	w.ctxs = append(w.ctxs, cancel)
	if s.mayVanish && w.rng.IntN(4) == 0 {
		// Its caller goes away mid-call, at a point the seed picks.
		w.sch.vanishAt(s.name, 1+w.rng.IntN(12), cancel)
	}
	w.mu.Unlock()
	w.sch.register(s.name)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer w.sch.done(s.name)
		s.run(ctx)
	}()
}

// run lets every actor go and schedules them to the end.
func (w *world) run() error { return runWorlds([]*world{w}) }

// runWorlds lets every actor of the worlds, one schedule's, go and
// schedules them to the end, checking each world after every step.
func runWorlds(ws []*world) error {
	sch := ws[0].sch
	for _, w := range ws {
		for _, s := range w.specs {
			w.start(s)
		}
	}
	for {
		if err := sch.settle(); err != nil {
			return err
		}
		for _, w := range ws {
			if err := w.check(); err != nil {
				return w.in(ws, err)
			}
			if err := w.checkViews(); err != nil {
				return w.in(ws, err)
			}
		}
		if _, ok := sch.next(); ok {
			continue
		}
		expired := false
		for _, w := range ws {
			expired = w.expireLeft() || expired
		}
		if expired {
			continue // what vanished callers left ends: hubs and waiters act on it
		}
		if at := sch.delayedUntil(); !at.IsZero() {
			// Only a lock-delay is left to wait out: time passes.
			delaysWaited.Add(1)
			for _, c := range ws[0].clocks {
				if d := at.Sub(c.Now()); d > 0 {
					c.Advance(d)
				}
			}
			continue
		}
		if left := sch.unfinished(); len(left) > 0 {
			var keys []string
			for _, w := range ws {
				keys = append(keys, w.in(ws, errors.New(w.keys())).Error())
			}
			return fmt.Errorf("stuck: nobody can move, and %s still wait; keys: %s%s", strings.Join(left, ", "), strings.Join(keys, "; "), sch.describe())
		}
		break
	}
	for _, w := range ws {
		w.wg.Wait()
	}
	var errs []string
	for i, e := range ws[0].engines {
		// Every attempt gave its reference on the attempt lease back: one
		// kept would keep the lease alive as long as the engine runs.
		e.att.mu.Lock()
		refs := e.att.refs
		e.att.mu.Unlock()
		if refs != 0 {
			errs = append(errs, fmt.Sprintf("a finished run left %d references on gateway %d's attempt lease", refs, i))
		}
	}
	for _, w := range ws {
		if keys := w.keys(); keys != "none" {
			errs = append(errs, w.in(ws, fmt.Errorf("a finished run left keys behind: %s", keys)).Error())
		}
		w.mu.Lock()
		for _, v := range w.violations {
			errs = append(errs, w.in(ws, errors.New(v)).Error())
		}
		w.mu.Unlock()
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

// in names w's key space in err when the schedule has several worlds.
func (w *world) in(ws []*world, err error) error {
	if len(ws) == 1 {
		return err
	}
	return fmt.Errorf("in key space %s: %w", w.engines[0].Prefix(), err)
}

// expireLeft expires the leases callers that vanished left holding, as
// their TTLs would once nobody renews them, once nothing else can move. It
// reports whether it expired any.
func (w *world) expireLeft() bool {
	w.mu.Lock()
	left := w.leftForTTL
	w.leftForTTL = nil
	w.mu.Unlock()
	for _, id := range left {
		w.expire(context.Background(), id)
	}
	return len(left) > 0
}

// cancelAll ends every actor's context and lets every actor run free.
func (w *world) cancelAll() {
	w.sch.free.Store(true)
	w.mu.Lock()
	for _, c := range w.ctxs {
		c()
	}
	w.mu.Unlock()
	w.sch.mu.Lock()
	for _, a := range w.sch.actors {
		select {
		case a.release <- struct{}{}:
		default:
		}
	}
	w.sch.mu.Unlock()
}

// keys lists the lock keys left under the contended name.
func (w *world) keys() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := w.sch.cli.Get(ctx, w.engines[0].keys.namePrefix(w.name), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return err.Error()
	}
	if len(resp.Kvs) == 0 {
		return "none"
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, fmt.Sprintf("%s@%d(lease %x)", kv.Key[strings.LastIndexByte(string(kv.Key), '/')+1:], kv.CreateRevision, kv.Lease))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// checkElection verifies, in an election, that every leader's key rides on
// the lease its grant names (a proclaim must not move it off) and carries
// the value it last proclaimed.
func (w *world) checkElection(kvs []*mvccpb.KeyValue) error {
	if !w.election {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for client, g := range w.holding {
		for _, kv := range kvs {
			if kv.CreateRevision != g.Revision {
				continue
			}
			if clientv3.LeaseID(kv.Lease) != g.Lease {
				return fmt.Errorf("%s leads (token %d) but its key rides on lease %x, not its grant's %x", client, g.Token(), kv.Lease, g.Lease)
			}
			meta, err := decodeValue(kv.Value)
			if err != nil {
				return err
			}
			if v, ok := w.proclaimed[g.Revision]; ok && string(meta.Value) != v {
				return fmt.Errorf("%s leads (token %d) with value %q, not the %q it proclaimed", client, g.Token(), meta.Value, v)
			}
		}
	}
	return nil
}

// check verifies, between two steps, what etcd shows against what the
// actors believe.
func (w *world) check() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if !w.election {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	resp, err := w.sch.cli.Get(ctx, w.engines[0].keys.namePrefix(w.name), opts...)
	if err != nil {
		return err
	}
	if err := w.checkElection(resp.Kvs); err != nil {
		return err
	}
	live := map[int64]bool{}
	var order []int64 // live keys' create revisions, ascending
	var seen strings.Builder
	for _, kv := range resp.Kvs {
		live[kv.CreateRevision] = true
		order = append(order, kv.CreateRevision)
		fmt.Fprintf(&seen, "%d:%d ", kv.CreateRevision, kv.ModRevision)
	}
	w.keysSeen = seen.String()
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	var first int64
	if len(order) > 0 {
		first = order[0]
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		return errors.New(strings.Join(w.violations, "\n"))
	}
	var believers []string
	for client, g := range w.holding {
		if !live[g.Revision] {
			if until := w.earlyUntil[g.Revision]; !until.IsZero() {
				if w.clocks[0].Now().Before(until) {
					// Its lease was revoked early: it rightly believes on,
					// and nobody else may be granted meanwhile.
					believers = append(believers, client)
				} else {
					delete(w.holding, client) // its deadline passed
				}
				continue
			}
			if w.expiredRev[g.Revision] > 0 {
				delete(w.holding, client) // it lost the lock to an expiry
				continue
			}
			return fmt.Errorf("%s believes it holds (token %d) but its key was deleted by someone else", client, g.Token())
		}
		n := max(w.limitOf[g.Revision], 1)
		if n > 1 {
			// FIFO: a semaphore's holder is among the first n keys.
			if i := sort.Search(len(order), func(i int) bool { return order[i] >= g.Revision }); i >= n {
				return fmt.Errorf("%s believes it holds (token %d, limit %d) but %d keys were created before its own", client, g.Token(), n, i)
			}
		} else if g.Revision != first {
			return fmt.Errorf("%s believes it holds (token %d) but its key is not first (first created at %d)", client, g.Token(), first)
		}
		believers = append(believers, client)
	}
	// Every live holder holds under one limit n, and at most n hold.
	limits := map[int]int{}
	for _, c := range believers {
		limits[max(w.limitOf[w.holding[c].Revision], 1)]++
	}
	for n, k := range limits {
		if k > n || len(limits) > 1 {
			sort.Strings(believers)
			return fmt.Errorf("%d holders at once (limits %v): %s", len(believers), limits, strings.Join(believers, ", "))
		}
	}
	return nil
}

// checkViews verifies, between two steps, that ListLocks (whose queue
// DescribeQueue shares, and whose rule Describe, CheckFence, WatchLocks and
// force-release share) judges holders by the grant rule: at the revision
// it read, its holders are exactly the keys holdsByLimit — the checker's
// own statement of the rule — finds holding, its waiters are numbered as
// the Acquire stream numbers them, and every client that believes it
// holds a key live there is among its holders. It runs when the name's
// keys changed since it last ran.
func (w *world) checkViews() error {
	if w.keysSeen == w.keysViewed {
		return nil
	}
	w.keysViewed = w.keysSeen
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := w.engines[0]
	plain, election := nameOf(w.name)
	page, err := e.ListLocks(ctx, plain, "", 10)
	if err != nil {
		return err
	}
	var entries []QueueEntry
	for _, l := range page.Locks {
		if l.Name == plain && l.Election == election {
			entries = l.Entries
		}
	}
	resp, err := w.sch.cli.Get(ctx, e.keys.namePrefix(w.name), clientv3.WithPrefix(), clientv3.WithRev(page.Revision),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return err
	}
	if len(entries) != len(resp.Kvs) {
		return fmt.Errorf("ListLocks at revision %d lists %d keys of %q; etcd has %d", page.Revision, len(entries), w.name, len(resp.Kvs))
	}
	held := map[int64]bool{}
	for i, kv := range resp.Kvs {
		m, err := decodeValue(kv.Value)
		if err != nil {
			return err
		}
		n := max(m.Limit, 1)
		holds := holdsByLimit(resp.Kvs[:min(n, len(resp.Kvs))], kv.CreateRevision, n)
		want := int64(0)
		if !holds {
			want = max(int64(i-n+1), 1)
		}
		en := entries[i]
		if en.Revision != kv.CreateRevision || en.Holder() != holds || en.Position != want {
			return fmt.Errorf("ListLocks at revision %d: key %d (created at %d, limit %d) holder %v at position %d; the grant rule: holder %v at position %d",
				page.Revision, i, kv.CreateRevision, n, en.Holder(), en.Position, holds, want)
		}
		held[kv.CreateRevision] = holds
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for client, g := range w.holding {
		if holds, live := held[g.Revision]; live && !holds {
			return fmt.Errorf("%s believes it holds (token %d), but ListLocks at revision %d lists its key as a waiter", client, g.Token(), page.Revision)
		}
	}
	return nil
}
