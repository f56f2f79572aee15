package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Session is one lease shared by many locks of a client: the SDK keeps it
// alive (KeepAliveSession every TTL/3, ±10%, like a lock's renewal) and the
// locks attached to it are not renewed one by one, so renewal cost grows
// with clients, not locks. When the session is lost every lock attached is
// lost with it, at the same moment and with the same guarantee as a lock
// of its own (see the package documentation). The locks are not checked
// one by one: a session lock is known lost only through its session.
// Safe for concurrent use.
type Session struct {
	c      *Client
	id     string
	ttl    time.Duration
	keeper *keeper

	mu     sync.Mutex
	closed bool
}

// errSessionClosed is the cause a session's context ends with on Close.
var errSessionClosed = &opError{op: "session", kind: ErrClosed}

// OpenSession grants a session lease (WithTTL sets its TTL; default the
// gateway's). It blocks for the call, retried on other endpoints on
// transient failures. A retry after a lost answer may leave an unused
// session lease behind; it lapses at its TTL.
func (c *Client) OpenSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	const op = "open session"
	if err := c.checkOpen(op); err != nil {
		return nil, err
	}
	var cfg sessionConfig
	for _, o := range opts {
		o.applySession(&cfg)
	}
	if cfg.ttl < 0 {
		return nil, invalid(op, "ttl %s is negative; want 0 (the gateway's default) or at least 1s", cfg.ttl)
	}
	clk := c.cfg.clock
	var resp *v1.OpenSessionResponse
	var sent time.Time
	err := c.call(ctx, op, func(ctx context.Context, rpc leasegatev1connect.LockServiceClient) error {
		sent = clk.Now()
		r, err := rpc.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: c.cfg.clientID, TtlMs: cfg.ttl.Milliseconds()}))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s := &Session{c: c, id: resp.SessionId, ttl: time.Duration(resp.TtlMs) * time.Millisecond}
	if s.ttl <= 0 {
		return nil, &opError{op: op, kind: ErrUnavailable, cause: errors.New("the gateway opened a session without a TTL")}
	}
	s.keeper = c.startKeeper(s.ttl, sent, c.deadline(sent, confirmation{ttl: s.ttl, valid: ms(resp.ValidForMs)}), s.keepAliveRPC, func(cause error) error {
		return &opError{op: "session", kind: ErrSessionLost, cause: cause}
	})
	return s, nil
}

func (s *Session) keepAliveRPC(ctx context.Context, rpc leasegatev1connect.LockServiceClient) (confirmation, error) {
	resp, err := rpc.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: s.id}))
	if err != nil {
		return confirmation{}, err
	}
	return confirmation{ttl: ms(resp.Msg.TtlMs), valid: ms(resp.Msg.ValidForMs)}, nil
}

// TTL is the session lease's effective TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Expires is the session's conservative deadline on the client's clock,
// which is also the deadline of every lock attached. It does not block.
func (s *Session) Expires() time.Time { return s.keeper.Deadline() }

// Context is cancelled the moment the session is lost or closed;
// context.Cause returns the same error as Err.
func (s *Session) Context() context.Context { return s.keeper.ctx }

// Done is closed when the session is lost or closed.
func (s *Session) Done() <-chan struct{} { return s.keeper.ctx.Done() }

// Err returns nil while the session is alive, an error wrapping
// ErrSessionLost once it is lost, or ErrClosed after Close.
func (s *Session) Err() error {
	if s.keeper.ctx.Err() == nil {
		return nil
	}
	return context.Cause(s.keeper.ctx)
}

// check fails when the session is over.
func (s *Session) check(op string) error {
	if err := s.Err(); err != nil {
		return &opError{op: op, cause: err}
	}
	return nil
}

// Acquire is Client.Acquire for a lock attached to the session: the lock
// has no lease of its own (WithTTL is ignored), is not renewed on its own,
// and is lost when the session is. The wait also ends when the session
// does. It blocks like Client.Acquire.
func (s *Session) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return s.c.acquire(ctx, name, s, opts)
}

// TryAcquire is Client.TryAcquire for a lock attached to the session. It
// never waits in the queue.
func (s *Session) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return s.c.tryAcquire(ctx, name, s, opts)
}

// Close ends the session: it stops the keepalives and revokes the session
// lease, which releases every lock attached (their Err becomes
// ErrReleased). It blocks until a gateway confirms, the retries are spent
// or ctx ends. It is idempotent and returns nil after the session was
// lost; if no gateway answers it returns an error wrapping ErrUnavailable,
// the locks lapse at the session's TTL, and calling Close again retries.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	lost := s.keeper.stop(errSessionClosed)
	if lost != nil && !errors.Is(lost, ErrUnavailable) {
		s.closed = true
		return nil
	}
	err := s.c.call(ctx, "close session", func(ctx context.Context, rpc leasegatev1connect.LockServiceClient) error {
		_, err := rpc.CloseSession(ctx, connect.NewRequest(&v1.CloseSessionRequest{SessionId: s.id}))
		return err
	})
	if err != nil && lost == nil {
		return err
	}
	s.closed = true
	return nil
}
