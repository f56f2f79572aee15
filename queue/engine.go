package queue

import (
	"context"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Engine grants named locks over one etcd cluster, in any number of key
// spaces. It is safe for concurrent use and keeps no state that a restart
// loses: everything a lock is lives in etcd and in its Handle.
//
// An Engine value acts in one key space: the one New returns in
// Config.Prefix, the one Space returns in the prefix it is given. Every
// space of an engine shares one core — one attempt lease, one lease pool,
// one set of keepalive streams, the name hubs, the session, end and watch
// views (each kept by space and name), the caches and the background
// tasks — so a cluster needs one engine however many spaces it serves. A
// call acts on the keys of its own space alone: every key it reads,
// writes, compares or watches is under that space's prefix, so a handle,
// a session or a request id of one space means nothing in another.
type Engine struct {
	*core
	// keys is the layout of the space this value acts in.
	keys keys
}

// core is what every space of an engine shares.
type core struct {
	cli  *clientv3.Client
	cfg  Config
	ka   *keepAliver
	hubs *hubSet
	sess *sessionWatch
	// watches are the shared views of WatchLocks (watchview.go).
	watches *watchSet
	tel     *engineTel
	att     attemptLease
	pool    *leasePool
	ends    *endWatch
	// id names the engine in the stamps it writes (delay.go).
	id string
	// sessTTLs remembers the TTLs of sessions seen (loss.go).
	sessTTLs *lru.Cache[sessionRef, time.Duration]
	// endFacts remembers the ends of deleted keys (ends.go).
	endFacts *lru.Cache[endKey, endFacts]
	// spaces are the spaces other than Config.Prefix that calls used
	// lately, the most recent spacesKept of them: the record sweep
	// (sweep.go) and CountAllLocks cover them beside Config.Prefix.
	spaces *lru.Cache[string, struct{}]

	// hooks order the engine's interleaving points in the explorer's
	// tests; nil in production.
	hooks hooks

	ctx    context.Context
	cancel context.CancelFunc
	// bg is the context of background tasks (cleanups, give-ups, revokes):
	// it outlives ctx by up to closeGrace (Close).
	bg       context.Context
	bgCancel context.CancelFunc
	// tasks counts the background tasks (background); wg the engine's
	// other goroutines, which ctx stops.
	tasks sync.WaitGroup
	wg    sync.WaitGroup
}

// spacesKept bounds the spaces an engine remembers for its sweep and
// CountAllLocks. A space forgotten is still served; only its sweep waits
// for its next call.
const spacesKept = 10_000

// New returns an engine over cli, acting in Config.Prefix. The engine does
// not own cli: Close leaves it open.
func New(cli *clientv3.Client, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	bg, bgCancel := context.WithCancel(context.Background())
	c := &core{
		bg:       bg,
		bgCancel: bgCancel,
		cli:      cli,
		cfg:      cfg,
		ka:       newKeepAliver(cli, cfg.Clock.Now),
		tel:      newEngineTel(cfg.Telemetry),
		ctx:      ctx,
		cancel:   cancel,
	}
	e := &Engine{core: c, keys: keys{prefix: cfg.Prefix}}
	c.hubs, c.sess, c.watches, c.ends = &hubSet{e: e}, &sessionWatch{e: e}, newWatchSet(e), &endWatch{e: e}
	c.att.e = e
	c.pool = newLeasePool(e, cfg.LeasePool)
	c.sessTTLs, _ = lru.New[sessionRef, time.Duration](sessionTTLs)
	c.endFacts, _ = lru.New[endKey, endFacts](endFactsCached)
	c.spaces, _ = lru.New[string, struct{}](spacesKept)
	c.id = newAttempt()
	c.wg.Add(1)
	go e.sweepRecords(ctx)
	return e, nil
}

// Space returns the engine acting in the key space under prefix: the same
// engine (Close of any space closes it for all), whose calls read and
// write only keys under prefix, in the layout of every space. prefix must
// start with '/' and not end with one, like Config.Prefix; a space nested
// in Config.Prefix must not begin with a segment of the engine's own
// layout (a tenant space under "/t/" never does), so that no key of one
// space is ever a key of another. Space blocks on nothing.
func (e *Engine) Space(prefix string) (*Engine, error) {
	if err := validSpace(e.cfg.Prefix, prefix); err != nil {
		return nil, err
	}
	if prefix != e.cfg.Prefix {
		e.spaces.Add(prefix, struct{}{})
	}
	return e.in(prefix), nil
}

// in is the engine acting in the space under prefix, which is valid.
func (e *Engine) in(prefix string) *Engine {
	if prefix == e.keys.prefix {
		return e
	}
	return &Engine{core: e.core, keys: keys{prefix: prefix}}
}

// Prefix is the prefix of the key space e acts in.
func (e *Engine) Prefix() string { return e.keys.prefix }

// servedSpaces lists the prefixes of the spaces the sweep covers:
// Config.Prefix and the spaces remembered.
func (e *Engine) servedSpaces() []string {
	return append([]string{e.cfg.Prefix}, e.spaces.Keys()...)
}

// Client is the etcd client the engine uses.
func (e *Engine) Client() *clientv3.Client { return e.cli }

// Config is the engine's configuration, with the Prefix of the space e
// acts in.
func (e *Engine) Config() Config {
	c := e.cfg
	c.Prefix = e.keys.prefix
	return c
}

// closeGrace bounds how long Close lets background tasks in flight finish.
const closeGrace = 2 * time.Second

// Close stops background work, in every space of the engine, and blocks
// until it has stopped. Cleanups, give-ups and revocations already started
// get up to closeGrace (bounded by RequestTimeout) to finish, because a
// session key whose give-up is cut short stays for as long as its session
// lives; past it they are abandoned, and per-lock leases expire on their
// own. A wait in progress ends with ErrClosed. It revokes the pooled
// leases, spending at most a second on it (any left lapse within their
// TTL; no key rides on them). It leaves the attempt lease to lapse:
// detached waiters keep their places for about an AttemptTTL, for a retry
// on another gateway to take over.
func (e *Engine) Close() {
	e.pool.close()
	e.cancel()
	e.ka.close()
	e.hubs.close()
	e.sess.close()
	e.watches.close()
	done := make(chan struct{})
	go func() {
		e.tasks.Wait()
		close(done)
	}()
	grace := time.NewTimer(min(closeGrace, e.cfg.RequestTimeout))
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		e.bgCancel()
		<-done
	}
	e.bgCancel()
	e.wg.Wait()
}

// perSpace is an engine's watch machinery of one kind, by space or prefix:
// an entry is made by its first user and removed by its last, under mu.
type perSpace[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*V
	wg sync.WaitGroup // the entries' goroutines, where they count here
}

// getLocked returns k's entry, made by mk (made: true) when there is none.
func (p *perSpace[K, V]) getLocked(k K, mk func() *V) (v *V, made bool) {
	if v = p.m[k]; v == nil {
		if p.m == nil {
			p.m = map[K]*V{}
		}
		v, made = mk(), true
		p.m[k] = v
	}
	return v, made
}

// dropLocked removes k's entry if it is still v, and reports so.
func (p *perSpace[K, V]) dropLocked(k K, v *V) bool {
	if p.m[k] != v {
		return false
	}
	delete(p.m, k)
	return true
}

// close waits for the goroutines counted in wg.
func (p *perSpace[K, V]) close() { p.wg.Wait() }

// Handle names one waiter key and proves its ownership. It is everything a
// holder needs to renew or release, so the gateway can encode it into an
// opaque lock id and keep no state.
type Handle struct {
	// Name is the lock name.
	Name string
	// WaiterID is the key segment derived from the request id.
	WaiterID string
	// HoldID names one hold of a re-entered lock (reenter.go): the waiter
	// id of the re-entrant acquire that took it. Empty for the key's own
	// hold, the only one of every lock not re-entered.
	HoldID string
	// Lease is the etcd lease the key is attached to.
	Lease clientv3.LeaseID
	// Revision is the create revision of the key.
	Revision int64
	// Epoch is the shard-map epoch the waiter was enqueued under.
	Epoch uint16
	// Secret proves ownership.
	Secret Secret
	// Session is true when Lease is a session lease shared by other locks;
	// releasing the lock then leaves the lease alone.
	Session bool
}

// Token is the fencing token of the grant this handle names.
func (h Handle) Token() int64 { return Token(h.Epoch, h.Revision) }

// Grant is a held lock.
type Grant struct {
	Handle
	// TTL is the effective lease TTL (whole seconds, at least etcd's minimum).
	TTL time.Duration
	// Deadline is conservative: the time the request that last confirmed
	// the lease was sent, plus TTL. The lease may outlive it, never the
	// reverse, so a holder that stops work by Deadline is safe.
	Deadline time.Time
	// Valid is how long after the acquire began (Enqueue or TryAcquire was
	// called) the lease is certain to live: Deadline minus that moment. A
	// client that sent its request before the call began can add Valid to
	// its own send time and stay safe, whatever its clock reads. Zero for a
	// session lock, whose deadline is its session's.
	Valid time.Duration
	// Resumed is true when an earlier acquire with the same request id had
	// already enqueued this waiter.
	Resumed bool
	// Holds is the lock's hold count after a re-entrant acquire re-entered
	// it (2 and up); 0 for every other grant, which is the lock's only hold.
	Holds int
	// hold is the nonce a re-entered hold's entry carries for this grant:
	// giving the grant up drops the hold only while it is still that.
	hold string

	// attempt is the mod revision of the granting attempt's last write to
	// the key: Abandon removes the key only if it is still that.
	attempt int64
	// keep: the grant is of a key (or a hold) already granted before its
	// attempt took it over; another attempt may have delivered it, so
	// giving this grant up gives nothing up.
	keep bool
}

// Holder describes the current holder of a name.
type Holder struct {
	// ClientID is the holder's self-reported identity.
	ClientID string
	// Token is the holder's fencing token.
	Token int64
	// TTL is the holder's lease TTL.
	TTL time.Duration
	// Expires is when the holder's lease will lapse unless renewed, as
	// reported by etcd's remaining TTL (whole seconds, so approximate).
	Expires time.Time
}

// opCtx returns a context for engine-owned cleanup work that must run even
// when the caller's context is done.
func (e *Engine) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, e.cfg.RequestTimeout)
}

// revokeLater revokes a per-lock lease in the background: its keys are
// already gone or unwanted, and leaving it to expire would load etcd's
// rate-limited expiry path.
func (e *Engine) revokeLater(ctx context.Context, lease clientv3.LeaseID) {
	e.background(ctx, "revoke", e.cfg.RequestTimeout, func(ctx context.Context) {
		_, _ = e.cli.Revoke(ctx, lease)
	})
}

// renewLease sends one keepalive and returns the effective TTL and the
// conservative deadline measured from the send.
func (e *Engine) renewLease(ctx context.Context, lease clientv3.LeaseID) (time.Duration, time.Time, error) {
	ttl, sent, err := e.ka.renew(ctx, lease)
	if err != nil {
		return 0, time.Time{}, err
	}
	d := time.Duration(ttl) * time.Second
	return d, sent.Add(d), nil
}
