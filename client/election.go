package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Election is one election name: campaign to lead it, read or observe its
// leader. It mirrors etcd's concurrency.Election on leasegate's FIFO queue
// and fencing tokens: campaigners are elected in the order they arrived,
// and every term's token is above every earlier term's. An election name
// never meets a lock name: election "x" and lock "x" are independent.
// Making one does not block or call a gateway.
type Election struct {
	c    *Client
	s    *Session // nil: a campaign's leadership has a lease of its own
	name string
}

// Election returns the election name on c.
func (c *Client) Election(name string) *Election { return &Election{c: c, name: name} }

// Election returns the election name on the session's client, whose
// campaigns ride on the session's leases as its locks do.
func (s *Session) Election(name string) *Election { return &Election{c: s.c, s: s, name: name} }

// Name is the election's name.
func (e *Election) Name() string { return e.name }

// Campaign waits in the election's queue until the caller leads, then
// publishes value as the leader's (at most 4096 bytes). It blocks, retries
// and fails like Client.Acquire (or Session.Acquire for a session's
// election), with the same options: WithTTL, WithWaitTimeout,
// WithRequestID, WithOnQueued, WithManualRenew. The returned Leadership is
// renewed in the background until Resign or loss; its Context ends the
// moment leadership is lost.
func (e *Election) Campaign(ctx context.Context, value []byte, opts ...AcquireOption) (*Leadership, error) {
	op := fmt.Sprintf("campaign %q", e.name)
	if len(value) > v1.MaxValueBytes {
		return nil, invalid(op, "value is %d bytes; the limit is %d", len(value), v1.MaxValueBytes)
	}
	value = bytes.Clone(value)
	// The streamOnce of ElectionService.Campaign: the Elected message is
	// returned as the grant it is.
	l, err := e.c.acquireStream(ctx, op, e.name, e.s, opts, func(ctx context.Context, ep endpoint, req *v1.AcquireRequest, onQueued func(int64)) (*v1.Granted, bool, error) {
		stream, err := ep.elect.Campaign(ctx, connect.NewRequest(&v1.CampaignRequest{
			Name: req.Name, Value: value, TtlMs: req.TtlMs, ClientId: req.ClientId,
			WaitTimeoutMs: req.WaitTimeoutMs, RequestId: req.RequestId, SessionId: req.SessionId,
		}))
		return receiveGrant(stream, err, onQueued, func(m *v1.CampaignResponse) (*v1.Queued, *v1.Granted) {
			el := m.GetElected()
			if el == nil {
				return m.GetQueued(), nil
			}
			return nil, &v1.Granted{LockId: el.LeaderId, FencingToken: el.FencingToken, ExpiresAt: el.ExpiresAt,
				TtlMs: el.TtlMs, Shard: el.Shard, ValidForMs: el.ValidForMs}
		})
	}, true)
	if err != nil {
		return nil, err
	}
	return &Leadership{e: e, lock: l}, nil
}

// Leadership is a term as an election's leader. It is a lock underneath:
// renewed like one, lost like one, and its Token fences the leader's
// writes. Every method is safe for concurrent use.
type Leadership struct {
	e    *Election
	lock *Lock
}

// Election is the election led.
func (l *Leadership) Election() *Election { return l.e }

// Token is the term's fencing token: it grows with every term.
func (l *Leadership) Token() int64 { return l.lock.Token() }

// ID is the opaque leader id (a lock id: RenewByID and ReleaseByID take
// it). It carries the leader's secret: treat it like a password.
func (l *Leadership) ID() string { return l.lock.ID() }

// Shard names the etcd cluster the election lives on.
func (l *Leadership) Shard() string { return l.lock.Shard() }

// RequestID is the request id the term was granted under; see
// Lock.RequestID.
func (l *Leadership) RequestID() string { return l.lock.RequestID() }

// TTL is the lease's effective TTL.
func (l *Leadership) TTL() time.Duration { return l.lock.TTL() }

// Expires is the term's current conservative deadline; see Lock.Expires.
func (l *Leadership) Expires() time.Time { return l.lock.Expires() }

// Context returns a context cancelled the moment leadership is lost or
// resigned; derive the leader's work from it.
func (l *Leadership) Context() context.Context { return l.lock.Context() }

// Done is closed when leadership is lost or resigned.
func (l *Leadership) Done() <-chan struct{} { return l.lock.Done() }

// Err is nil while the caller leads; then an error wrapping ErrLockLost
// (lost) or ErrReleased (resigned). It does not block.
func (l *Leadership) Err() error { return l.lock.Err() }

// Renew renews the term's lease now, as Lock.Renew: for a leadership
// campaigned WithManualRenew.
func (l *Leadership) Renew(ctx context.Context) (time.Time, error) { return l.lock.Renew(ctx) }

// Resign ends the term and stops its renewal, as Lock.Release: it is
// idempotent and can never end a later term. It blocks until a gateway
// confirms or the retries are spent.
func (l *Leadership) Resign(ctx context.Context) error { return l.lock.Release(ctx) }

// Proclaim replaces the leader's value while the caller still leads. A
// term that has ended (lost to an expiry, or resigned) is refused with an
// error wrapping ErrLockLost, and the value stays the current leader's. It
// blocks for the call, retried on other endpoints on transient failures.
func (l *Leadership) Proclaim(ctx context.Context, value []byte) error {
	op := fmt.Sprintf("proclaim %q", l.e.name)
	if len(value) > v1.MaxValueBytes {
		return invalid(op, "value is %d bytes; the limit is %d", len(value), v1.MaxValueBytes)
	}
	_, _, err := unary(ctx, l.e.c, op, &v1.ProclaimRequest{LeaderId: l.lock.ID(), Value: value}, leasegatev1connect.ElectionServiceClient.Proclaim)
	return err
}

// LeaderInfo describes an election's leader.
type LeaderInfo struct {
	// Value is what the leader campaigned with or last proclaimed.
	Value []byte
	// Token is the term's fencing token.
	Token int64
	// ClientID is the leader's self-reported identity (WithClientID).
	ClientID string
}

func leaderInfo(m *v1.Leader) *LeaderInfo {
	if m == nil {
		return nil
	}
	return &LeaderInfo{Value: m.Value, Token: m.FencingToken, ClientID: m.ClientId}
}

// Leader reads the election's leader; it fails with an error wrapping
// ErrNoLeader when nobody leads. It blocks for the call, retried on other
// endpoints on transient failures.
func (e *Election) Leader(ctx context.Context) (*LeaderInfo, error) {
	op := fmt.Sprintf("leader %q", e.name)
	r, _, err := unary(ctx, e.c, op, &v1.LeaderRequest{Name: e.name}, leasegatev1connect.ElectionServiceClient.Leader)
	if connect.CodeOf(err) == connect.CodeNotFound {
		return nil, &opError{op: op, kind: ErrNoLeader}
	}
	return leaderInfo(r.GetLeader()), err
}

// Observe yields the election's leader now (nil when nobody leads) and
// then each change of leader or of its value, from the gateways' etcd
// watches. It follows a gateway that fails or shuts down to the next
// endpoint, where it starts again from the state then (a change that came
// and went meanwhile may be missed; the state yielded last is never older
// than one yielded before it), and does not yield a state equal to the
// last. It ends when ctx ends (yielding nothing more), when the loop
// stops, or with a final error that no retry can fix (a bad name, a
// refused credential). Iterate it once.
func (e *Election) Observe(ctx context.Context) iter.Seq2[*LeaderInfo, error] {
	return func(yield func(*LeaderInfo, error) bool) {
		op := fmt.Sprintf("observe %q", e.name)
		var last *LeaderInfo
		seen := false
		stopped := errors.New("the loop stopped")
		_ = follow(ctx, e.c, func(ctx context.Context, ep endpoint) (*connect.ServerStreamForClient[v1.ObserveResponse], error) {
			return ep.elect.Observe(ctx, connect.NewRequest(&v1.ObserveRequest{Name: e.name}))
		}, func(m *v1.ObserveResponse) error {
			cur := leaderInfo(m.Leader)
			if seen && sameLeader(cur, last) {
				return nil
			}
			last, seen = cur, true
			if !yield(cur, nil) {
				return stopped
			}
			return nil
		}, func(err error) error {
			if err != nil && !retryable(err) && rateLimited(err) == nil {
				yield(nil, wrap(op, err))
				return stopped
			}
			return nil
		})
	}
}

func sameLeader(a, b *LeaderInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Token == b.Token && a.ClientID == b.ClientID && bytes.Equal(a.Value, b.Value)
}
