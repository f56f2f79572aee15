package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// keeper keeps one lock's own lease alive (a session's leases have their
// own renewer, session_keeper.go, built on the same rules) and
// owns the conservative deadline derived from it. Its context is cancelled,
// with the cause, the moment the lease is known lost (a gateway refuses
// the proof of ownership) or reaches its deadline unconfirmed.
//
// The deadline is always sendTime + TTL - margin of the last confirmed
// request, where sendTime is read from the clock before the request left.
// The lease's real expiry is measured by etcd from when the request
// arrived, so it is later; only a clock running slower here than on the
// etcd leader could invert that, which the margin absorbs.
type keeper struct {
	c      *Client
	ttl    time.Duration
	margin time.Duration
	renew  func(ctx context.Context, rpc leasegatev1connect.LockServiceClient) (confirmation, error)
	// lostErr turns the cause of a loss into the error the owner reports.
	lostErr func(cause error) error

	ctx    context.Context
	cancel context.CancelCauseFunc

	leaseState

	// manual turns the scheduled renewals off: only renewNow renews.
	manual bool
	// manualc hands the run loop the answers of renewNow's renewals, so
	// that one goroutine moves the deadline and declares loss.
	manualc chan manualRenewal

	stopOnce sync.Once
	stopc    chan struct{}
	done     chan struct{}
	// lostc hands the run loop a loss learnt elsewhere (the hold watch).
	lostc chan error
}

// manualRenewal is a renewal renewNow made; processed closes once the run
// loop has applied it.
type manualRenewal struct {
	result    renewResult
	processed chan struct{}
}

type renewResult struct {
	sent time.Time
	confirmation
	err error
}

// confirmation is what a gateway answered about a lease: its TTL and how
// long it is certain to live from the request's arrival (valid; 0 when the
// gateway did not say).
type confirmation struct {
	ttl, valid time.Duration
}

// deadline is the conservative deadline a confirmation of a request sent at
// sent gives: the tighter of sent + TTL and sent + valid, less the margin.
// A gateway's valid may be shorter than TTL — the keepalive that confirmed
// the lease can have been sent before the request arrived — and sent is
// before the arrival, so sent + valid never outlives the lease.
func (c *Client) deadline(sent time.Time, conf confirmation) time.Time {
	d := conf.ttl
	if conf.valid > 0 && conf.valid < d {
		d = conf.valid
	}
	return sent.Add(d - c.cfg.marginFor(conf.ttl))
}

// startKeeper starts keeping a lease whose TTL is ttl, last confirmed by a
// request sent at anchor, with the conservative deadline that confirmation
// gave.
func (c *Client) startKeeper(ttl time.Duration, anchor, deadline time.Time, manual bool,
	renew func(context.Context, leasegatev1connect.LockServiceClient) (confirmation, error),
	lostErr func(error) error) *keeper {
	k := &keeper{
		c: c, ttl: ttl, margin: c.cfg.marginFor(ttl), renew: renew, lostErr: lostErr, manual: manual,
		manualc: make(chan manualRenewal), stopc: make(chan struct{}), done: make(chan struct{}), lostc: make(chan error, 1),
	}
	k.ctx, k.cancel = context.WithCancelCause(context.Background())
	k.deadline = deadline
	go k.run(anchor)
	return k
}

// renewInterval is the jittered pause between a confirmation of a lease of
// ttl and the next renewal, for locks and sessions alike: TTL × renew
// fraction, ±10%.
func (c *Client) renewInterval(ttl time.Duration) time.Duration {
	base := float64(ttl) * c.cfg.renewFraction
	return time.Duration(base * (0.9 + 0.2*rand.Float64()))
}

func (k *keeper) run(anchor time.Time) {
	defer close(k.done)
	clk := k.c.cfg.clock
	actx, acancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		acancel()
		wg.Wait()
	}()
	results := make(chan renewResult, 1)
	inflight := false
	bo := k.c.newBackoff()
	var last error

	deadline := k.Deadline()
	deadlineT := clk.NewTimer(deadline.Sub(clk.Now()))
	// renewT is nil for a lock renewed by hand: it never fires.
	var renewT Timer
	schedule := func(d time.Duration) {
		if k.manual {
			return
		}
		if renewT != nil {
			renewT.Stop() // pending still when Renew confirmed the lease
		}
		renewT = clk.NewTimer(d)
	}
	schedule(anchor.Add(k.c.renewInterval(k.ttl)).Sub(clk.Now()))
	defer func() {
		deadlineT.Stop()
		if renewT != nil {
			renewT.Stop()
		}
	}()
	// process applies a renewal's answer; it reports whether the lock is
	// lost.
	process := func(r renewResult) (lost bool) {
		if now := clk.Now(); !now.Before(deadline) {
			// Never later than the deadline, even if an answer raced it.
			k.lose(k.lostErr(deadlinePassed(deadline, r.err)))
			return true
		}
		switch {
		case r.err == nil:
			// A renewal never changes a lease's TTL: an answer claiming a
			// longer one than the grant's is credited the grant's.
			conf := r.confirmation
			conf.ttl = min(conf.ttl, k.ttl)
			if d := k.c.deadline(r.sent, conf); d.After(deadline) {
				deadline = d
				k.extend(d)
				deadlineT.Stop()
				deadlineT = clk.NewTimer(d.Sub(clk.Now()))
			}
			last = nil
			bo.reset()
			schedule(r.sent.Add(k.c.renewInterval(k.ttl)).Sub(clk.Now()))
		case proofRefused(r.err):
			k.lose(k.lostErr(r.err))
			k.observe(r)
			return true
		default:
			last = r.err
			schedule(retryPause(bo, r.err))
		}
		k.observe(r)
		return false
	}
	for {
		select {
		case <-k.stopc:
			return
		case <-deadlineT.C():
			k.lose(k.lostErr(deadlinePassed(deadline, last)))
			return
		case <-timerC(renewT):
			if inflight {
				continue
			}
			inflight = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				results <- k.attempt(actx)
			}()
		case r := <-results:
			inflight = false
			if process(r) {
				return
			}
		case err := <-k.lostc:
			k.lose(err)
			return
		case m := <-k.manualc:
			lost := process(m.result)
			close(m.processed)
			if lost {
				return
			}
		}
	}
}

// timerC is t's channel, or nil (never ready) for a nil t.
func timerC(t Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// observe reports a processed renewal to WithOnRenew's function.
func (k *keeper) observe(r renewResult) {
	if k.c.cfg.onRenew != nil {
		k.c.cfg.onRenew(r.sent, r.err)
	}
}

// attempt sends one renewal to the current endpoint once the client's
// renewal gate admits it (the most urgent leases first; see renewGate).
// Any failure that does not prove the lease gone moves later attempts to
// the next endpoint.
func (k *keeper) attempt(ctx context.Context) renewResult {
	clk := k.c.cfg.clock
	release, err := k.c.renews.enter(ctx, k.Deadline())
	if err != nil {
		// Only when the keeper stops: its deadline ends the wait.
		return renewResult{sent: clk.Now(), err: err}
	}
	defer release()
	i, ep := k.c.pick()
	// Read after the wait: the request leaves now.
	sent := clk.Now()
	actx, cancel := withTimeout(ctx, clk, min(k.c.cfg.requestTimeout, k.ttl/4))
	defer cancel()
	conf, err := k.renew(actx, ep.rpc)
	if err != nil && !proofRefused(err) && rateLimited(err) == nil {
		k.c.failed(i)
	}
	return renewResult{sent: sent, confirmation: conf, err: err}
}

// deadlinePassed is the cause of a loss by deadline, for locks and
// sessions alike; last is why the lease was last not confirmed.
func deadlinePassed(deadline time.Time, last error) error {
	return &opError{op: fmt.Sprintf("no gateway confirmed the lease before its deadline %s", deadline.Format(time.RFC3339Nano)), kind: ErrUnavailable, cause: last}
}

// retryPause is the pause before a renewer's next attempt after err: the
// backoff's, or the delay a gateway's rate limit asked for (it says when its
// rate allows the next renewal; the deadline timer still bounds the wait).
func retryPause(bo *backoff, err error) time.Duration {
	pause := bo.next()
	if rl := rateLimited(err); rl != nil && rl.RetryAfter > 0 {
		return rl.RetryAfter
	}
	return pause
}

// loseNow ends the lease with err, learnt outside the renewals: the run
// loop declares it, as it does every loss.
func (k *keeper) loseNow(err error) {
	select {
	case k.lostc <- err:
	case <-k.done:
	}
}

func (k *keeper) lose(err error) {
	k.mu.Lock()
	k.lostBy = err
	k.mu.Unlock()
	k.cancel(err)
}

// stop ends the renewals and waits for them to finish. If the lease was not
// lost by then, the context is cancelled with cause. It returns the cause
// of a loss before the stop, or nil.
func (k *keeper) stop(cause error) (lost error) {
	k.stopOnce.Do(func() { close(k.stopc) })
	<-k.done
	k.cancel(cause)
	return k.lost()
}

// WithManualRenew turns the background renewal of the lock off: the lock
// lives until its conservative deadline (Lock.Expires) unless the caller
// renews it with Lock.Renew before then, which moves the deadline. Its
// Context still ends, with ErrLockLost, at the deadline, or at once when a
// gateway proves it lost. Use it when the work knows better than a timer
// when it needs more time (a batch that renews between steps), as a lease
// in etcd's concurrency package is kept by hand. Default off: the SDK
// renews every TTL/3. Locks acquired through a Session ignore it: the
// session keeps their lease.
func WithManualRenew() AcquireOption {
	return acquireFunc(func(c *acquireConfig) { c.manualRenew = true })
}

// Renew renews the lock's lease now and returns its new conservative
// deadline (what Expires reports from then on). It blocks until a gateway
// confirms the lease, the retries (every endpoint, at least 3 attempts)
// are spent, or ctx ends. It works whether or not the lock was acquired
// WithManualRenew; the background renewal, if on, counts its next renewal
// from this one's answer.
//
// A gateway proving the lock gone ends the lock (Done closes) and Renew
// returns an error wrapping ErrLockLost, as Err does. A renewal that no
// gateway answered in time leaves the lock held until its unchanged
// deadline and returns an error wrapping ErrUnavailable (or
// ErrRateLimited); calling Renew again retries. Renew on a lock lost or
// released returns Err. A session lock has no lease of its own: Renew
// returns an error wrapping ErrInvalidArgument.
func (l *Lock) Renew(ctx context.Context) (deadline time.Time, err error) {
	op := "renew " + l.op()
	if l.keeper == nil {
		return time.Time{}, invalid(op, "the lock belongs to a session, which keeps its lease; renew the session instead")
	}
	if err := l.Err(); err != nil {
		return time.Time{}, err
	}
	k := l.keeper
	clk := l.c.cfg.clock
	// A renewal is worth trying only while the lock can still be proven
	// held: the attempts (and any rate-limit pause) end at its deadline,
	// or when the keeper stops.
	ctx, cancel := withTimeout(ctx, clk, k.Deadline().Sub(clk.Now()))
	defer cancel()
	go func() { // ends with ctx, which the deferred cancel ends
		select {
		case <-k.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	r := l.c.renewCall(ctx, op, k.renew)
	m := manualRenewal{result: r, processed: make(chan struct{})}
	select {
	case k.manualc <- m:
		<-m.processed
	case <-k.done:
		// Stopped or lost meanwhile: the lock's own error says which.
	}
	if err := l.Err(); err != nil {
		return time.Time{}, err
	}
	if r.err != nil {
		return time.Time{}, r.err
	}
	return k.Deadline(), nil
}
