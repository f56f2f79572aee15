package queue

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Engine grants named locks over one etcd cluster. It is safe for
// concurrent use and keeps no state that a restart loses: everything a lock
// is lives in etcd and in its Handle.
type Engine struct {
	cli  *clientv3.Client
	cfg  Config
	keys keys
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
	sessTTLs *lru.Cache[clientv3.LeaseID, time.Duration]
	// endFacts remembers the ends of deleted keys (ends.go).
	endFacts *lru.Cache[endKey, endFacts]

	// hooks order the engine's interleaving points in the explorer's
	// tests; nil in production.
	hooks hooks

	// busy counts calls, waits and background tasks in progress; lastUsed
	// is when the engine was last entered or touched (Unix nanoseconds).
	busy     atomic.Int64
	lastUsed atomic.Int64

	ctx    context.Context
	cancel context.CancelFunc
	// bg is the context of background tasks (cleanups, give-ups, revokes):
	// it outlives ctx by up to closeGrace, so that Close lets the tasks
	// that make a key nobody serves go away finish instead of cutting
	// them (a give-up cut short leaves a session key behind for as long as
	// its session lives).
	bg       context.Context
	bgCancel context.CancelFunc
	// tasks counts the background tasks (background); wg the engine's
	// other goroutines, which ctx stops.
	tasks sync.WaitGroup
	wg    sync.WaitGroup

	// testHookBeforeViewRead runs before a name hub reads its view at the
	// revision its watch started at (tests compact history at that moment).
	testHookBeforeViewRead func()
}

// New returns an engine over cli. The engine does not own cli: Close leaves
// it open.
func New(cli *clientv3.Client, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	bg, bgCancel := context.WithCancel(context.Background())
	e := &Engine{
		bg:       bg,
		bgCancel: bgCancel,
		cli:      cli,
		cfg:      cfg,
		keys:     keys{prefix: cfg.Prefix},
		ka:       newKeepAliver(cli, cfg.Clock.Now),
		tel:      newEngineTel(cfg.Telemetry),
		ctx:      ctx,
		cancel:   cancel,
	}
	e.hubs, e.sess, e.watches, e.ends = newHubSet(e), newSessionWatch(e), newWatchSet(e), newEndWatch(e)
	e.att.e = e
	e.pool = newLeasePool(e, cfg.LeasePool)
	e.sessTTLs, _ = lru.New[clientv3.LeaseID, time.Duration](sessionTTLs)
	e.endFacts, _ = lru.New[endKey, endFacts](endFactsCached)
	e.id = newAttempt()
	e.wg.Add(1)
	go e.sweepRecords(ctx)
	e.Touch()
	return e, nil
}

// enter counts a call, wait or background task in progress until the
// returned func runs, and marks the engine used both when it starts and
// when it ends: a wait that lasted longer than a cache's idle bound leaves
// the engine fresh, so it is not closed under its caller's next step (a
// grant's Abandon, a release).
func (e *Engine) enter() func() {
	e.Touch()
	exit := e.observe()
	return func() {
		e.Touch() // before busy drops, so Idle never sees the old time
		exit()
	}
}

// observe counts work in progress without marking the engine used: for
// the metrics poller's counts, which must not keep an idle engine alive.
func (e *Engine) observe() func() {
	e.busy.Add(1)
	var once sync.Once
	return func() { once.Do(func() { e.busy.Add(-1) }) }
}

// Touch marks the engine as used now, so Idle does not report it for a
// while: a cache that hands the engine out touches it first.
func (e *Engine) Touch() { e.lastUsed.Store(time.Now().UnixNano()) }

// Idle reports whether nothing runs in the engine — no call, wait or
// background task, no attempt lease in use — and nothing has for at least
// d. A cache of engines may close an idle one.
func (e *Engine) Idle(d time.Duration) bool {
	if e.busy.Load() > 0 {
		return false
	}
	e.att.mu.Lock()
	refs := e.att.refs
	e.att.mu.Unlock()
	return refs == 0 && time.Since(time.Unix(0, e.lastUsed.Load())) >= d
}

// Client is the etcd client the engine uses.
func (e *Engine) Client() *clientv3.Client { return e.cli }

// Config is the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// closeGrace bounds how long Close lets background tasks in flight finish.
const closeGrace = 2 * time.Second

// Close stops background work and blocks until it has stopped. Cleanups,
// give-ups and revocations already started get up to closeGrace (bounded
// by RequestTimeout) to finish, because a session key whose give-up is cut
// short stays for as long as its session lives; past it they are
// abandoned, and per-lock leases expire on their own. A wait still in progress ends with ErrClosed: its name's watch
// stops with the engine. It revokes the pooled leases, spending at most a
// second on it (any left lapse within their TTL; no key rides on them). It
// does not revoke the attempt lease: waiters detached from their attempts
// keep their places for about an AttemptTTL, for a retry on another
// gateway to take over.
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
	// asOf is a revision at which the key was first and carried the
	// attempt's write: what the grant rests on (the explorer checks it).
	asOf int64
	// heldFrom is the revision from which the key held its place among
	// the first keys — the revision its hub found it holding at, or its
	// own write's: a grant of a slot earned before another holder expired
	// is not that holder's slot (the explorer's lock-delay check).
	heldFrom int64
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

func validateIDs(clientID, requestID string) error {
	if err := ValidateClientID(clientID); err != nil {
		return err
	}
	return ValidateRequestID(requestID)
}
