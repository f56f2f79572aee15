//go:build linux

package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/leasegate/leasegate/client"
)

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// acquireSpec describes one recorded acquire.
type acquireSpec struct {
	who, role, name string
	// wait is the wait timeout; ignored by a TryAcquire.
	wait time.Duration
	// requestID is the idempotency key; empty draws a fresh one.
	requestID string
	// session, when set, attaches the lock to it.
	session *client.Session
	// try makes it a TryAcquire.
	try bool
	// ttl is the lease TTL; zero means the run's.
	ttl time.Duration
	// limit makes the name a semaphore of that limit; 0 or 1 is a lock.
	limit int
	// reentrant makes it a re-entrant session acquire (WithReentrant),
	// whose belief its caller follows (reentrant.go): a grant may be a
	// hold of a lock the session holds already.
	reentrant bool
}

// acquire runs one recorded Acquire. It returns the lock when granted.
func (h *Harness) acquire(ctx context.Context, s *sdk, who, role, name string, wait time.Duration) (*client.Lock, *AcquireOp) {
	return h.acquireWith(ctx, s, acquireSpec{who: who, role: role, name: name, wait: wait})
}

// acquireWith runs one recorded Acquire or TryAcquire as sp describes. It
// returns the lock when granted, and, unless sp.reentrant, follows the
// lock's Context from then on (AcquireOp.DoneAt).
func (h *Harness) acquireWith(ctx context.Context, s *sdk, sp acquireSpec) (*client.Lock, *AcquireOp) {
	rid := sp.requestID
	if rid == "" {
		rid = newRequestID()
	}
	wait := sp.wait
	if sp.try {
		wait = 0
	}
	ttl := sp.ttl
	if ttl == 0 {
		ttl = h.cfg.TTL
	}
	h.noteTTL(ttl)
	leaseTTL := ttl
	if sp.session != nil {
		leaseTTL = sp.session.TTL()
	}
	op := h.Hist.begin(&AcquireOp{Client: sp.who, Role: sp.role, Name: sp.name, Limit: sp.limit, RequestID: rid, Wait: wait, TTL: leaseTTL, Invoke: time.Now()})
	onQueued := h.recordQueued(op)
	opts := []client.AcquireOption{client.WithTTL(ttl), client.WithRequestID(rid)}
	if sp.limit > 1 {
		opts = append(opts, client.WithLimit(sp.limit))
	}
	if sp.reentrant {
		opts = append(opts, client.WithReentrant())
	}
	if !sp.try {
		opts = append(opts, client.WithWaitTimeout(wait), client.WithOnQueued(onQueued))
	}
	var l *client.Lock
	var err error
	switch {
	case sp.session != nil && sp.try:
		l, err = sp.session.TryAcquire(ctx, sp.name, opts...)
	case sp.session != nil:
		l, err = sp.session.Acquire(ctx, sp.name, opts...)
	default:
		var c *client.Client
		if c, err = s.forOp(h.Hist, op); err == nil {
			if sp.try {
				l, err = c.TryAcquire(ctx, sp.name, opts...)
			} else {
				l, err = c.Acquire(ctx, sp.name, opts...)
			}
		}
	}
	h.complete(ctx, op, err, func() (int64, string, string) { return l.Token(), l.Shard(), l.RequestID() })
	if l != nil && !sp.reentrant {
		h.followBelief(l, op)
	}
	return l, op
}

// complete records how op ended: granted (granted reports the token, the
// shard and the request id of the grant) or why not.
func (h *Harness) complete(ctx context.Context, op *AcquireOp, err error, granted func() (token int64, shard, rid string)) {
	done := time.Now()
	h.Hist.update(func() {
		op.Complete = done
		switch {
		case err == nil:
			var rid string
			op.Outcome = outGranted
			op.Token, op.Shard, rid = granted()
			if rid != op.RequestID {
				op.GrantedUnder = rid
			}
		case errors.Is(err, client.ErrWaitTimeout):
			op.Outcome, op.Err = outTimeout, err.Error()
		case errors.Is(err, client.ErrNotAcquired):
			op.Outcome, op.Err = outHeld, err.Error()
		case errors.Is(err, client.ErrLockLost):
			op.Outcome, op.Err = outLost, err.Error()
		case ctx.Err() != nil:
			op.Outcome, op.Err = outCanceled, err.Error()
		default:
			op.Outcome, op.Err = outError, err.Error()
		}
		if err != nil {
			op.Code, op.Reason = answerCode(err), answerReason(err)
		}
	})
}

// heldLock is what a holder of the workload holds: a *client.Lock, or an
// election's leadership (leaderTerm).
type heldLock interface {
	Context() context.Context
	Done() <-chan struct{}
	Err() error
	Expires() time.Time
	Release(ctx context.Context) error
	ID() string
	Token() int64
	Name() string
	Shard() string
}

// followBelief records when l's Context is done: the moment its holder
// stops believing it holds the lock, whether it notices at once or not.
func (h *Harness) followBelief(l heldLock, op *AcquireOp) {
	context.AfterFunc(l.Context(), func() {
		now := time.Now()
		h.Hist.update(func() { op.DoneAt = now })
	})
}

// hold writes the lock's token to the register a few times, as a holder
// that checks its lock before each write, then releases. It records when
// the holder stopped believing it held the lock.
func (h *Harness) hold(ctx context.Context, l heldLock, op *AcquireOp, who string, writes int, pause time.Duration) {
	for i := 0; i < writes; i++ {
		select {
		case <-l.Done():
			h.lost(l, op)
			return
		default:
		}
		if _, _, err := h.Reg.Write(ctx, who, op.Name, op.Token); err != nil {
			break
		}
		select {
		case <-l.Done():
			h.lost(l, op)
			return
		case <-time.After(pause):
		}
	}
	if mrand.IntN(4) == 0 {
		_, _ = h.Reg.Read(ctx, who, op.Name)
	}
	h.release(l, op)
}

// lost records the loss of l, and how it was lost: a gateway's proof, or
// the deadline passing unconfirmed.
func (h *Harness) lost(l heldLock, op *AcquireOp) {
	now := time.Now()
	err := l.Err()
	proof := err != nil && !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, client.ErrReleased)
	evicted := errors.Is(err, client.ErrEvicted)
	deadline := l.Expires()
	h.Hist.update(func() {
		op.End, op.Lost, op.LostProof, op.Deadline, op.ToldEvicted = now, true, proof, deadline, evicted
		if err != nil {
			op.LostErr = err.Error()
		}
	})
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.Release(rctx)
}

// release lets go of l and, once the gateway confirmed, offers its id to
// the replaying adversary.
func (h *Harness) release(l heldLock, op *AcquireOp) {
	if h.letGo(l, op) {
		h.stale.addLock(staleLock{id: l.ID(), token: l.Token(), name: l.Name(), shard: l.Shard(), client: op.Client})
	}
}

// letGo releases l, or records its loss when it is already gone. It
// reports whether a gateway confirmed the release.
func (h *Harness) letGo(l heldLock, op *AcquireOp) bool {
	now := time.Now()
	if l.Err() != nil {
		h.lost(l, op)
		return false
	}
	h.Hist.update(func() { op.End = now })
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return l.Release(rctx) == nil
}

// runWorkers runs the contended workload until ctx ends.
func (h *Harness) runWorkers(ctx context.Context) (*sync.WaitGroup, error) {
	var wg sync.WaitGroup
	for i := range h.cfg.Workers {
		who := fmt.Sprintf("w%d", i)
		c, err := h.newSDK(who, nil)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				name := h.names[mrand.IntN(len(h.names))]
				wait := time.Second + time.Duration(mrand.Int64N(int64(3*time.Second)))
				l, op := h.acquire(ctx, c, who, "worker", name, wait)
				if l == nil {
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				h.hold(ctx, l, op, who, 1+mrand.IntN(3), time.Duration(10+mrand.IntN(40))*time.Millisecond)
			}
		})
	}
	return &wg, nil
}

// probeResult is what the availability probes of one cluster saw.
type probeResult struct {
	// First is the time from the start to the first grant invoked after it;
	// -1 when none came.
	First time.Duration
	// OK and Failed count the probes.
	OK, Failed int
	// SlowFail counts probes that failed only after more than 2 s.
	SlowFail int
}

// probe fires an Acquire of a fresh, uncontended name on cluster every
// 100 ms from now until until, or until the first grant when stopOnGrant.
// It waits for every probe it started.
func (h *Harness) probe(ctx context.Context, cluster string, start, until time.Time, stopOnGrant bool) probeResult {
	res := probeResult{First: -1}
	var mu sync.Mutex
	var wg sync.WaitGroup
	granted := make(chan struct{})
	var once sync.Once
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(until) && ctx.Err() == nil {
		name := h.freshName("probe", cluster)
		if name == "" {
			return probeResult{First: 0}
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, 8*time.Second)
			defer cancel()
			l, op := h.acquire(pctx, h.probes, "probe", "probe", name, 5*time.Second)
			mu.Lock()
			if l == nil {
				res.Failed++
				if op.Complete.Sub(op.Invoke) > 2*time.Second {
					res.SlowFail++
				}
				mu.Unlock()
				return
			}
			res.OK++
			if !op.Invoke.Before(start) {
				if d := op.Complete.Sub(start); res.First < 0 || d < res.First {
					res.First = d
				}
				once.Do(func() { close(granted) })
			}
			mu.Unlock()
			h.release(l, op)
		})
		select {
		case <-granted:
			if stopOnGrant {
				wg.Wait()
				return res
			}
			granted = nil // measured; keep probing until until
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	wg.Wait()
	return res
}

// recordQueued returns an OnQueued callback that records, on op, when it
// was first and last told its queue position.
func (h *Harness) recordQueued(op *AcquireOp) func(int64) {
	return func(int64) {
		now := time.Now()
		h.Hist.update(func() {
			if op.Queued.IsZero() {
				op.Queued = now
			}
			op.LastQueued = now
		})
	}
}
