package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/leasegate/leasegate/internal/clock"
)

// An etcd client waits for a connection as long as its caller lets it: a
// call on a cluster that is down (its process stopped, its address closed,
// every member unreachable) would take the caller's whole timeout, 10 s at
// the gateway, before it said anything, and a session's renewal would
// wait as long for its one dead shard. A Reach bounds that wait, by two
// signs that the cluster cannot be reached:
//
//   - No connection: the client's connection is not ready (its members
//     refuse or drop connections). A call waits for one until the
//     connection has been down for ConnectTimeout, and after that fails at
//     once; a call running when the connection goes down is ended then.
//   - No answer: the connection is up but silent (a partition that holds
//     packets rather than refusing them, which TCP keepalive notices only
//     after 15 s). When calls have been running for half of ConnectTimeout
//     without any answer from the cluster, Probe asks the member for a
//     read it serves from memory, without its leader; if that too goes
//     unanswered for the other half, the running calls end and new ones
//     wait, as without a connection, until a probe is answered again
//     (probes go on while it is silent) or the connection is made anew.
//
// Either way the call fails with ErrShardUnavailable naming the cluster.
// A cluster that answers is never second-guessed: a slow one (a leader
// election, a slow disk) keeps its callers' own timeouts, and the breaker
// judges it. Reconnect is the patient wait, for the breaker's probe: it
// makes the connection try again at once and waits a whole ConnectTimeout
// for it, so a cluster that is back is found by the next probe.
//
// When ConnectTimeout is counted from the moment the cluster stopped being
// usable, the first call on a dead cluster learns it within about
// ConnectTimeout, and every later one at once.

// DefaultConnectTimeout is ReachConfig.ConnectTimeout's default.
const DefaultConnectTimeout = time.Second

// Conn is what a Reach watches of a cluster's client connection.
// *grpc.ClientConn, an etcd client's ActiveConnection, is one.
type Conn interface {
	// GetState returns the connection's state.
	GetState() connectivity.State
	// WaitForStateChange blocks until the state differs from source or
	// ctx ends, and reports which.
	WaitForStateChange(ctx context.Context, source connectivity.State) bool
	// Connect makes an idle connection connect.
	Connect()
	// ResetConnectBackoff makes a connection waiting out a backoff after
	// failed attempts try again at once.
	ResetConnectBackoff()
}

// ReachConfig configures a Reach. A zero field takes its default.
type ReachConfig struct {
	// ConnectTimeout is how long a call waits for a connection to a
	// cluster that has none, how long a running call outlives its
	// connection, and how long calls may go without an answer (half of it)
	// and then a probe (the other half) before a silent cluster is given
	// up on. Default DefaultConnectTimeout (1 s): a member restart or a
	// switch to another member takes far less, and a dead cluster's
	// callers learn it within about that.
	ConnectTimeout time.Duration
	// Probe asks the cluster for an answer that needs no leader: a
	// serializable read. Nil turns the check for a silent connection off.
	Probe func(ctx context.Context) error
	// Clock tells the time for those waits. Default the wall clock.
	Clock clock.Clock
}

// Reach follows one cluster's client connection and bounds how long a call
// waits for it. Create it with NewReach and stop it with Close. Safe for
// concurrent use.
type Reach struct {
	cluster string
	conn    Conn
	cfg     ReachConfig

	usable    atomic.Bool                // a connection is up and not found silent
	gen       atomic.Pointer[generation] // the current stretch of being usable
	reset     atomic.Int64               // unix nanos of the last backoff reset
	inflight  atomic.Int64               // calls running
	busySince atomic.Int64               // unix nanos when inflight last rose from 0
	giveUp    atomic.Int64               // unix nanos: while unusable, calls wait until then
	answered  atomic.Int64               // unix nanos of the cluster's last answer

	mu        sync.Mutex
	connReady bool          // the connection's own state is ready
	silent    bool          // ready, but a probe went unanswered
	up        chan struct{} // closed while usable; replaced when it stops being so

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// generation is one stretch of the cluster being usable. lost is
// cancelled, with the reason as its cause, when the stretch ends for
// good: at once when a probe went unanswered, ConnectTimeout after the
// connection went down if it did not come back. It ends the calls begun
// in the stretch.
type generation struct {
	lost   context.Context
	cancel context.CancelCauseFunc
	timer  clock.Timer // while the connection is down
}

func newGeneration() *generation {
	g := &generation{}
	g.lost, g.cancel = context.WithCancelCause(context.Background())
	return g
}

// NewReach starts following conn, the client connection of the named
// cluster. It does not block.
func NewReach(cluster string, conn Conn, cfg ReachConfig) *Reach {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	cfg.Clock = cmp.Or(cfg.Clock, clock.Real)
	ctx, stop := context.WithCancel(context.Background())
	r := &Reach{cluster: cluster, conn: conn, cfg: cfg, up: make(chan struct{}), stop: stop}
	r.gen.Store(newGeneration())
	r.giveUp.Store(r.now() + int64(cfg.ConnectTimeout)) // the first connection's time
	r.wg.Add(1)
	go r.follow(ctx)
	if cfg.Probe != nil {
		r.wg.Add(1)
		go r.watch(ctx)
	}
	return r
}

// Close stops following the connection. It blocks until the followers
// have stopped.
func (r *Reach) Close() {
	r.stop()
	r.wg.Wait()
}

// Ready reports whether the cluster is usable now: its connection is up
// and not found silent.
func (r *Reach) Ready() bool { return r.usable.Load() }

// Call runs fn once the cluster is usable, waiting for it at most until
// the cluster has been unusable for ConnectTimeout; if it is not by then,
// Call fails with an error wrapping ErrShardUnavailable that names the
// cluster, without calling fn. fn's
// context ends, with such an error as its cause, if the cluster stops
// being usable for good while fn runs; Call then returns that error. It
// blocks for as long as fn does.
func (r *Reach) Call(ctx context.Context, fn func(context.Context) error) error {
	if !r.usable.Load() {
		if err := r.await(ctx, time.Duration(r.giveUp.Load()-r.now())); err != nil {
			return err
		}
	}
	g := r.gen.Load()
	if r.inflight.Add(1) == 1 {
		r.busySince.Store(r.now())
	}
	defer r.inflight.Add(-1)
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(g.lost, func() { cancel(context.Cause(g.lost)) })
	err := fn(cctx)
	stop()
	if err == nil || !IsClusterFailure(err) {
		r.answered.Store(r.now())
	}
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		if cause := context.Cause(cctx); errors.Is(cause, ErrShardUnavailable) {
			return cause
		}
	}
	return err
}

func (r *Reach) now() int64 { return r.cfg.Clock.Now().UnixNano() }

// Reconnect makes a connection waiting out a reconnect backoff try again
// at once and waits, at most ConnectTimeout, until the cluster is usable.
// It fails as Call does when the cluster is not. It is the breaker's
// probe's first step.
func (r *Reach) Reconnect(ctx context.Context) error {
	if r.usable.Load() {
		return nil
	}
	r.reset.Store(0) // whatever the last reset was
	return r.await(ctx, r.cfg.ConnectTimeout)
}

// await waits until the cluster is usable, ctx ends or patience (perhaps
// none) passes.
func (r *Reach) await(ctx context.Context, patience time.Duration) error {
	// A connection waiting out a reconnect backoff (up to two minutes
	// after long failures) tries at once, so a cluster that is back is
	// found within this wait, not a backoff later. At most one reset per
	// tenth of the timeout: a crowd of callers is not a crowd of dials.
	now := r.now()
	if last := r.reset.Load(); now-last >= int64(r.cfg.ConnectTimeout/10) && r.reset.CompareAndSwap(last, now) {
		r.conn.ResetConnectBackoff()
	}
	r.mu.Lock()
	up := r.up
	r.mu.Unlock()
	if r.usable.Load() {
		return nil
	}
	if patience > 0 {
		t := r.cfg.Clock.NewTimer(patience)
		defer t.Stop()
		select {
		case <-up:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Errorf("%w: cluster %q: %s", ErrShardUnavailable, r.cluster, r.unusableWords())
}

// unusableWords says why the cluster is not usable. r.mu is held.
func (r *Reach) unusableWords() string {
	if r.silent {
		return fmt.Sprintf("its connection is up but etcd has not answered for %s", r.cfg.ConnectTimeout)
	}
	switch r.conn.GetState() {
	case connectivity.TransientFailure:
		return fmt.Sprintf("no connection to etcd for %s (its members refuse or drop connections)", r.cfg.ConnectTimeout)
	case connectivity.Shutdown:
		return "no connection to etcd (the client is closed)"
	}
	return fmt.Sprintf("no connection to etcd for %s", r.cfg.ConnectTimeout)
}

// follow tracks the connection's state until ctx ends or the connection
// shuts down.
func (r *Reach) follow(ctx context.Context) {
	defer r.wg.Done()
	for {
		st := r.conn.GetState()
		r.observe(st == connectivity.Ready)
		switch st {
		case connectivity.Shutdown:
			return
		case connectivity.Idle:
			// An idle connection connects only when asked; a call is
			// coming, or the cluster would not be in use.
			r.conn.Connect()
		}
		if !r.conn.WaitForStateChange(ctx, st) {
			return
		}
	}
}

// observe records the connection's readiness.
func (r *Reach) observe(ready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ready == r.connReady {
		return
	}
	r.connReady = ready
	// A connection made anew starts unsuspected; one that went down
	// takes the suspicion with it.
	r.silent = false
	if ready {
		r.setUsable()
		return
	}
	if !r.usable.Load() {
		return // already given up on, by a probe
	}
	r.setUnusable(r.cfg.ConnectTimeout)
	g := r.gen.Load()
	g.timer = clock.AfterFunc(r.cfg.Clock, r.cfg.ConnectTimeout, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.usable.Load() || r.gen.Load() != g {
			return // back in time: a stale timer
		}
		g.cancel(fmt.Errorf("%w: cluster %q: the connection to etcd was lost and not regained within %s", ErrShardUnavailable, r.cluster, r.cfg.ConnectTimeout))
	})
}

// setUsable makes the cluster usable, in a new generation if the last one
// was lost. r.mu is held.
func (r *Reach) setUsable() {
	if r.usable.Load() {
		return
	}
	g := r.gen.Load()
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	if g.lost.Err() != nil {
		r.gen.Store(newGeneration())
	}
	r.usable.Store(true)
	close(r.up)
}

// setUnusable makes new calls wait, for at most grace from now. r.mu is
// held.
func (r *Reach) setUnusable(grace time.Duration) {
	r.usable.Store(false)
	r.up = make(chan struct{})
	r.giveUp.Store(r.now() + int64(grace))
}

// watch probes the cluster while calls go unanswered, and while it is
// given up on as silent, until ctx ends.
func (r *Reach) watch(ctx context.Context) {
	defer r.wg.Done()
	for clock.Sleep(ctx, r.cfg.Clock, r.cfg.ConnectTimeout/10) {
		if r.probeDue() {
			r.probe(ctx)
		}
	}
}

// probeDue reports whether the cluster should be asked for an answer now:
// calls have waited half of ConnectTimeout without one, or it was given
// up on as silent.
func (r *Reach) probeDue() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.connReady {
		return false // the connection's state speaks for itself
	}
	if r.silent {
		return true
	}
	if r.inflight.Load() == 0 {
		return false
	}
	quiet := max(r.answered.Load(), r.busySince.Load())
	return r.now()-quiet >= int64(r.cfg.ConnectTimeout/2)
}

// probe asks the cluster for an answer, within half of ConnectTimeout,
// and judges it by the outcome.
func (r *Reach) probe(ctx context.Context) {
	pctx, cancel := clock.WithTimeoutCause(ctx, r.cfg.Clock, r.cfg.ConnectTimeout/2, nil)
	err := r.cfg.Probe(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil || !IsClusterFailure(err) {
		r.answered.Store(r.now())
		if r.silent {
			r.silent = false
			r.setUsable()
		}
		return
	}
	if r.silent || !r.connReady || !r.usable.Load() {
		return
	}
	r.silent = true
	r.setUnusable(0) // the calls and the probe have waited already
	r.gen.Load().cancel(fmt.Errorf("%w: cluster %q: its connection is up but etcd answered neither calls nor a probe for %s", ErrShardUnavailable, r.cluster, r.cfg.ConnectTimeout))
}
