package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Lock is a held lock: a lease on a name, with the fencing token of the
// grant. Unless it belongs to a Session, the SDK renews it in the
// background until Release or loss. Every method is safe for concurrent use.
//
// Stop the work the lock protects when Done closes, and pass Token to the
// protected resource with every write: the lock can be lost at any time
// (see the package documentation), and only the resource can refuse a
// write that a paused or partitioned holder sends too late.
type Lock struct {
	c     *Client
	name  string
	id    string
	shard string
	token int64
	ttl   time.Duration
	rid   string // the request id the grant was made under
	holds int    // the lock's hold count when granted (WithReentrant)

	keeper *keeper     // the lock's own lease; nil in a session
	sess   *Session    // nil for a lock with its own lease
	lease  *shardLease // the session's lease on the lock's shard; nil without a session

	ctx       context.Context
	cancel    context.CancelCauseFunc // session locks only
	stopAfter func() bool             // session locks only

	mu       sync.Mutex
	released bool
	// asked: a Release ran and cancelled ctx itself, so ctx no longer
	// tells a loss; lostFirst is what had ended the lock before it (nil:
	// nothing). Session locks only.
	asked     bool
	lostFirst error
}

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Token is the fencing token of this grant: it only grows per name.
// Present it to the protected resource with every write.
func (l *Lock) Token() int64 { return l.token }

// HoldCount is the lock's hold count when this Lock was granted: 1, or
// more for a WithReentrant acquire that re-entered a lock its session
// held. Each such Lock is a hold of its own, with its own ID: its Release
// drops that hold.
func (l *Lock) HoldCount() int { return l.holds }

// ID is the opaque lock id for RenewByID and ReleaseByID. It carries the
// holder's secret: treat it like a password.
func (l *Lock) ID() string { return l.id }

// Shard names the etcd cluster the lock lives on.
func (l *Lock) Shard() string { return l.shard }

// RequestID is the request id the lock was granted under: WithRequestID's,
// or the one the SDK drew. A session lock whose session had to replace its
// lease on the lock's shard while the call waited was granted under a fresh
// id (the key left under the old one died with the old lease), so it can
// differ from the one asked for.
func (l *Lock) RequestID() string { return l.rid }

// TTL is the lease's effective TTL (whole seconds, at least etcd's minimum).
func (l *Lock) TTL() time.Duration { return l.ttl }

// Session is the session the lock is attached to, or nil.
func (l *Lock) Session() *Session { return l.sess }

// Expires is the lock's current conservative deadline on the client's
// clock: Context is cancelled at this moment unless a renewal (or, in a
// session, a keepalive of the session's lease on the lock's shard)
// confirms the lease before it. It moves forward with each confirmation.
// It does not block.
func (l *Lock) Expires() time.Time {
	if l.keeper != nil {
		return l.keeper.Deadline()
	}
	return l.lease.Deadline()
}

// Context returns a context that is cancelled the moment the lock is lost
// or released; context.Cause then returns the same error as Err. Derive the
// contexts of the protected work from it.
func (l *Lock) Context() context.Context { return l.ctx }

// Done returns a channel that is closed when the lock is lost or released.
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lock is held; after Done closes it returns an
// error wrapping ErrLockLost and the cause when the lock was lost, or
// ErrReleased when it was released (or its session closed). It does not
// block.
func (l *Lock) Err() error { return context.Cause(l.ctx) }

func (l *Lock) op() string { return fmt.Sprintf("lock %q", l.name) }

// lostError is the error a lock reports when cause ends it: ErrEvicted
// for an eviction, ErrReleased for a release it did not make itself,
// ErrLockLost otherwise.
func (l *Lock) lostError(cause error) error {
	kind := ErrLockLost
	if kindOf(cause) == ErrEvicted {
		kind = ErrEvicted
	}
	return &opError{op: l.op(), kind: kind, cause: cause}
}

// renewRPC renews the lock's own lease once on rpc.
func (l *Lock) renewRPC(ctx context.Context, rpc leasegatev1connect.LockServiceClient) (confirmation, error) {
	resp, err := rpc.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: l.id, FencingToken: l.token}))
	if err != nil {
		return confirmation{}, err
	}
	return confirmation{ttl: ms(resp.Msg.TtlMs), valid: ms(resp.Msg.ValidForMs)}, nil
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// attach ties a session lock's lifetime to the session's lease on its
// shard: the lock is lost with that lease, whatever the session's other
// leases do.
func (l *Lock) attach(s *Session, lease *shardLease) {
	l.sess, l.lease = s, lease
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	sctx := lease.ctx
	l.stopAfter = context.AfterFunc(sctx, func() {
		cause := context.Cause(sctx)
		if errors.Is(cause, ErrClosed) {
			l.cancel(ErrReleased)
			return
		}
		l.cancel(l.lostError(cause))
	})
	l.c.watchHold(l, func(err error) { l.cancel(err) })
}

// lostBeforeRelease ends a session lock's context for its Release and
// returns what had ended the lock before, nil if nothing had: the cause
// its context ended with before the first call, or the end since of the
// session's lease on the lock's shard. The context is cancelled by the
// first call, so later calls (a Release no gateway answered) cannot read a
// loss from it; a Release retried after an unanswered one must still be
// sent, for a session lock does not lapse while its session lives. A
// session closed without a gateway's confirmation ends the lock's context
// but frees nothing (its lease lives on until its TTL): that end is
// reported as nil, so the release is sent and its failure reported.
func (l *Lock) lostBeforeRelease() error {
	if !l.asked {
		l.stopAfter()
		l.lostFirst = context.Cause(l.ctx)
		l.asked = true
		l.cancel(ErrReleased)
	}
	if l.lostFirst != nil && !errors.Is(l.lostFirst, ErrReleased) {
		return l.lostFirst
	}
	if l.lease.ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(l.lease.ctx); !errors.Is(cause, ErrClosed) {
		return l.lostError(cause)
	}
	if l.sess.freed.Load() {
		return ErrReleased // the session's close freed it
	}
	return nil // closed, but no gateway confirmed that the lease is gone
}

// Release frees the lock and stops its renewal; Done closes and Err
// reports ErrReleased. It blocks until a gateway confirms, the retries
// (every endpoint, at least 3 attempts) are spent, or ctx ends.
//
// It is idempotent and safe after loss: it returns nil when the lock was
// already released, lost, or freed by its TTL, and a gateway can never
// free a newer holder's lock with it. When the lock was lost only because
// no gateway could confirm it, Release still tries to free it, but it
// returns nil whatever the outcome. Otherwise, if no gateway answers, it
// returns an error wrapping ErrUnavailable and calling Release again
// retries; a lock of its own then lapses at its TTL at the latest, a
// session's lock lives as long as its session. A session's lock whose
// session was closed frees nothing more once a gateway confirmed the
// close; before that, Release still frees it, and fails as above if no
// gateway answers.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return nil
	}
	var lost error
	if l.keeper != nil {
		lost = l.keeper.stop(ErrReleased)
	} else {
		lost = l.lostBeforeRelease()
	}
	// Unless a gateway proved the lock gone, or its session was closed,
	// which leaves nothing to free.
	if lost == nil || errors.Is(lost, ErrUnavailable) {
		_, _, err := unary(ctx, l.c, "release "+l.op(), &v1.ReleaseRequest{LockId: l.id, FencingToken: l.token}, leasegatev1connect.LockServiceClient.Release)
		if err != nil && lost == nil {
			return err
		}
	}
	l.released = true
	return nil
}

// watchHold keeps a watch of l on a gateway (LockService.WatchHold) from
// DefaultHoldWatchAfter (WithHoldWatch) after the grant until l is done,
// and ends l the moment a gateway says how it ended: evicted (ErrEvicted),
// or lost. A watch that fails (its gateway stopped, a link broke) is opened
// again on the next gateway after a backoff that grows while the watches
// fail and starts again after one that delivered; the renewals go on
// beside it and still decide the lock's deadline. A watch a gateway will
// not serve — refused at the tenant's cap on open streams (QUOTA_EXCEEDED)
// or unknown to it (unimplemented) — is not asked for again: the lock is
// held as well without it. A watch refused at the tenant's renew rate is
// asked for again on the same gateway after the gateway's delay. lose ends
// l with the error it is given.
func (c *Client) watchHold(l *Lock, lose func(error)) {
	after := c.cfg.holdWatch
	if after < 0 {
		return
	}
	go func() {
		ctx := l.ctx
		// On the real clock: the watch's start and its pauses are no
		// deadlines, and a fake clock's timers are its tests' to count.
		if sleep(ctx, RealClock, after) != nil {
			return
		}
		bo := c.newBackoff()
		for ctx.Err() == nil {
			i, ep := c.pick()
			stream, err := ep.rpc.WatchHold(ctx, connect.NewRequest(&v1.WatchHoldRequest{LockId: l.id, FencingToken: l.token}))
			if err == nil {
				for stream.Receive() {
					bo.reset()
					if m := stream.Msg(); m.Reason != v1.ErrorReason_ERROR_REASON_UNSPECIFIED {
						_ = stream.Close()
						lose(l.lostError(holdEnded(m)))
						return
					}
				}
				err = stream.Err()
				_ = stream.Close()
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil && proofRefused(err) {
				// The gateway proved the lock gone or not the caller's.
				lose(l.lostError(err))
				return
			}
			if err != nil && watchNotServed(err) {
				return
			}
			pause := bo.next()
			switch rl := rateLimited(err); {
			case rl != nil:
				// The tenant's renew budget, not the gateway, refused it:
				// ask this gateway again after its delay; the renewals,
				// which decide the deadline, are not moved with it.
				pause = max(pause, rl.RetryAfter)
			case err == nil || retryable(err):
				c.failed(i)
			}
			if sleep(ctx, RealClock, pause) != nil {
				return
			}
		}
	}()
}

// watchNotServed reports a WatchHold answer that asking again would not
// change soon: the tenant's streams are at their cap, or the gateway does
// not know the call.
func watchNotServed(err error) bool {
	return connect.CodeOf(err) == connect.CodeUnimplemented || Reason(err) == ReasonQuotaExceeded
}

// holdEnded is the gateway's account of how a held lock ended, as the
// error a renewal would have answered.
func holdEnded(m *v1.WatchHoldResponse) error {
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New(m.Message))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: m.Reason.String(), Domain: v1.ErrorDomain}); err == nil {
		ce.AddDetail(d)
	}
	if m.AuditId != "" && m.Message == "" {
		return fmt.Errorf("%w (audit record %s)", ce, m.AuditId)
	}
	return ce
}
