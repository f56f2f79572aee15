package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Session shares leases among many locks of a client: one lease per shard
// (etcd cluster), so renewal cost grows with clients, not locks. The SDK
// keeps every lease alive with one KeepAliveSession call every TTL/3,
// ±10%, and the locks attached are not renewed one by one.
//
// Each shard's lease lives and dies on its own, with its own conservative
// deadline (see the package documentation): a lock in the session is lost
// when the lease on its own shard is lost or reaches its deadline
// unconfirmed, at that moment, and never because another shard failed.
// A shard that is down when the session opens, or that joins the shard map
// later, is added when a lock is first taken there; so is a new lease for a
// shard whose lease was lost (its old locks stay lost).
//
// The session itself ends when every lease it holds is lost, or at Close.
// Safe for concurrent use.
type Session struct {
	c   *Client
	ttl time.Duration

	ctx    context.Context // ends when every lease is lost, or at Close
	cancel context.CancelCauseFunc

	mu   sync.Mutex
	view *sessionView

	extending chan struct{} // holds a token while an extension runs: one at a time, so none is wasted

	settle settleState // request ids of held Locks and of abandoned calls (settle.go)

	kick     chan struct{} // wakes the renewer when the leases change
	stopOnce sync.Once
	stopc    chan struct{}
	done     chan struct{}

	closeMu sync.Mutex
	closed  bool
	// freed is set once Close has left nothing of the session's leases to
	// free: a gateway confirmed it, or no lease was left live. Until then
	// a closed session's leases may live on in etcd until their TTL.
	freed atomic.Bool
}

// errSessionClosed is the cause a session's context ends with on Close.
var errSessionClosed = &opError{op: "session", kind: ErrClosed}

// OpenSession opens a session (WithTTL sets its TTL; default the
// gateway's). It blocks for the call, retried on other endpoints on
// transient failures. It succeeds when at least one shard answers: shards
// that are down are added later, when a lock is first taken there. A retry
// after a lost answer may leave unused session leases behind; they lapse
// at their TTL.
func (c *Client) OpenSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	const op = "open session"
	if err := c.checkOpen(op); err != nil {
		return nil, err
	}
	var cfg sessionConfig
	for _, o := range opts {
		o.applySession(&cfg)
	}
	if err := checkTTL(op, cfg.ttl); err != nil {
		return nil, err
	}
	resp, sent, err := unary(ctx, c, op, &v1.OpenSessionRequest{ClientId: c.cfg.clientID, TtlMs: cfg.ttl.Milliseconds()}, leasegatev1connect.LockServiceClient.OpenSession)
	if err != nil {
		return nil, err
	}
	leases := c.shardLeases(sent, resp.Shards)
	if len(leases) == 0 {
		return nil, &opError{op: op, kind: ErrUnavailable, cause: errNoShard}
	}
	s := &Session{
		c: c, ttl: ms(resp.TtlMs), view: &sessionView{id: resp.SessionId, leases: leases},
		kick: make(chan struct{}, 1), stopc: make(chan struct{}), done: make(chan struct{}),
		extending: make(chan struct{}, 1),
	}
	if s.ttl <= 0 {
		return nil, &opError{op: op, kind: ErrUnavailable, cause: errors.New("the gateway opened a session without a TTL")}
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	go s.run(sent)
	return s, nil
}

// current is the view acquires and keepalives use now.
func (s *Session) current() *sessionView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view
}

// wake tells the renewer that the leases changed.
func (s *Session) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// loseLease marks l lost with cause and ends the session if no lease is
// left live.
func (s *Session) loseLease(l *shardLease, cause error) {
	if !l.lose(cause) {
		return
	}
	s.mu.Lock()
	if len(s.view.live()) == 0 {
		s.cancel(&opError{op: "session", kind: ErrSessionLost, cause: cause})
	}
	s.mu.Unlock()
	s.wake()
}

// install makes l, opened under session id, the session's lease on its
// shard. It fails, and l is left to lapse, when the session ended in the
// meantime.
func (s *Session) install(id string, l *shardLease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ctx.Err(); err != nil {
		l.cancel(context.Cause(s.ctx))
		return context.Cause(s.ctx)
	}
	s.view = s.view.with(id, l)
	s.wake()
	return nil
}

// TTL is the session's effective TTL, as the gateway granted it.
func (s *Session) TTL() time.Duration { return s.ttl }

// Shards lists, sorted, the shards on which the session holds a live
// lease. It does not block.
func (s *Session) Shards() []string {
	var out []string
	for _, l := range s.current().live() {
		out = append(out, l.shard)
	}
	return out
}

// Expires is the earliest conservative deadline among the session's live
// leases, on the client's clock: the first moment some of its locks can be
// lost unless a keepalive confirms them first. A lock's own deadline is
// Lock.Expires, its shard's. Once the session is over it is the deadline
// of its last lease. It does not block.
func (s *Session) Expires() time.Time {
	v := s.current()
	var first, last time.Time
	for _, l := range v.leases {
		d := l.Deadline()
		if l.lost() == nil && (first.IsZero() || d.Before(first)) {
			first = d
		}
		if d.After(last) {
			last = d
		}
	}
	if first.IsZero() {
		return last
	}
	return first
}

// Context is cancelled when the session is over: when every lease it
// holds is lost (not when one shard's is: see Lock.Context for that), or
// at Close. context.Cause returns the same error as Err.
func (s *Session) Context() context.Context { return s.ctx }

// Done is closed when the session is over, like Context.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns nil while the session holds a live lease, an error wrapping
// ErrSessionLost once every lease is lost, or ErrClosed after Close.
func (s *Session) Err() error { return context.Cause(s.ctx) }

// check fails when the session is over.
func (s *Session) check(op string) error {
	if err := s.Err(); err != nil {
		return &opError{op: op, cause: err}
	}
	return nil
}

// Acquire is Client.Acquire for a lock attached to the session: the lock
// has no lease of its own (WithTTL is ignored), is not renewed on its own,
// and is lost when the session's lease on its shard is. If the session has
// no live lease on the name's shard, Acquire opens one and retries. The
// wait also ends when the session does. It blocks like Client.Acquire.
func (s *Session) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return s.c.acquire(ctx, name, s, opts)
}

// TryAcquire is Client.TryAcquire for a lock attached to the session,
// extending the session to the name's shard like Acquire. It never waits
// in the queue.
func (s *Session) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return s.c.tryAcquire(ctx, name, s, opts)
}

// stop ends the renewals and waits for them to finish.
func (s *Session) stop() {
	s.stopOnce.Do(func() { close(s.stopc) })
	<-s.done
}

// Close ends the session: it stops the keepalives and revokes the session's
// leases, which releases every lock attached (their Err becomes
// ErrReleased). It blocks until a gateway confirms, the retries are spent
// or ctx ends. It is idempotent and returns nil after the session was
// lost. If no gateway answers, or a shard is down, it returns an error
// wrapping ErrUnavailable; the locks it could not free lapse at their
// lease's TTL, and calling Close again retries.
func (s *Session) Close(ctx context.Context) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.stop()
	s.mu.Lock()
	lost := s.Err()
	if errors.Is(lost, ErrClosed) {
		lost = nil // an earlier Close that could not confirm: retry it
	}
	view := s.view
	s.cancel(errSessionClosed)
	free := false
	for _, l := range view.leases {
		l.cancel(errSessionClosed)
		// A lease proven gone has nothing left to free; one that was
		// live, or lost only because nobody confirmed it, may.
		if err := l.lost(); err == nil || errors.Is(err, ErrUnavailable) {
			free = true
		}
	}
	s.mu.Unlock()
	if free {
		_, _, err := unary(ctx, s.c, "close session", &v1.CloseSessionRequest{SessionId: view.id}, leasegatev1connect.LockServiceClient.CloseSession)
		if err != nil && lost == nil {
			return err
		}
	}
	s.closed = true
	s.freed.Store(true)
	return nil
}
