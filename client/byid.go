package client

import (
	"context"
	"fmt"
	"time"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Description is a lock name's state as a gateway reports it.
type Description struct {
	// Name is the lock's name.
	Name string
	// Held reports whether someone holds the lock.
	Held bool
	// HolderClientID is the holder's self-reported identity.
	HolderClientID string
	// HolderExpires is when the holder's lease lapses unless renewed, on
	// the gateway's clock.
	HolderExpires time.Time
	// Token is the holder's fencing token; 0 when free.
	Token int64
	// Waiters is the number of waiters behind the holder.
	Waiters int64
	// TTL is the holder's lease TTL.
	TTL time.Duration
	// Shard names the etcd cluster the name lives on.
	Shard string
	// Limit is the name's semaphore limit: 1 for a lock, 0 when free.
	Limit int
	// DelayUntil, when set, is when a pending lock-delay ends at the
	// latest: a holder that asked for one expired, and nobody is granted
	// the name before it (WithLockDelay).
	DelayUntil time.Time
	// Holders lists every holder, oldest first: one for a lock, up to
	// Limit for a semaphore. The Holder… fields and Token describe the
	// first.
	Holders []Holder
}

// Holder is one holder of a name.
type Holder struct {
	// ClientID is the holder's self-reported identity.
	ClientID string
	// Expires is when its lease lapses unless renewed, on the gateway's
	// clock.
	Expires time.Time
	// Token is its fencing token.
	Token int64
	// TTL is its lease TTL.
	TTL time.Duration
}

// Describe reports a name's holder and queue. It blocks for the call,
// retried on other endpoints on transient failures.
func (c *Client) Describe(ctx context.Context, name string) (Description, error) {
	op := fmt.Sprintf("describe %q", name)
	m, _, err := unary(ctx, c, op, &v1.DescribeRequest{Name: name}, leasegatev1connect.LockServiceClient.Describe)
	if err != nil {
		return Description{}, err
	}
	d := Description{
		Name: m.Name, Held: m.Held, HolderClientID: m.HolderClientId, HolderExpires: timeOf(m.HolderExpiresAt), Token: m.FencingToken,
		Waiters: m.Waiters, TTL: ms(m.TtlMs), Shard: m.Shard, Limit: int(m.Limit), DelayUntil: timeOf(m.DelayUntil),
	}
	for _, h := range m.Holders {
		d.Holders = append(d.Holders, Holder{ClientID: h.ClientId, Expires: h.ExpiresAt.AsTime(), Token: h.FencingToken, TTL: ms(h.TtlMs)})
	}
	return d, nil
}

// Renewal is a gateway's answer to RenewByID.
type Renewal struct {
	// Expires is the lease's conservative expiry on the gateway's clock.
	Expires time.Time
	// TTL is the lease's effective TTL.
	TTL time.Duration
	// Deadline is conservative on this client's clock: the send time of
	// the renewal that was answered plus the tighter of TTL and what the
	// gateway said the lease owes from the request's arrival, less the
	// safety margin. Unlike Expires it needs no clock agreement.
	Deadline time.Time
}

// RenewByID renews a lock known only by its id and token, such as one
// acquired by another process (leasectl acquire). Locks from Acquire renew
// themselves; this is for the rest. It blocks for the call, retried on
// other endpoints on transient failures, and fails with an error wrapping
// ErrLockLost when the lock expired or was taken over.
func (c *Client) RenewByID(ctx context.Context, lockID string, token int64) (Renewal, error) {
	r, sent, err := unary(ctx, c, "renew", &v1.RenewRequest{LockId: lockID, FencingToken: token}, leasegatev1connect.LockServiceClient.Renew)
	if err != nil {
		return Renewal{}, err
	}
	ttl := ms(r.TtlMs)
	return Renewal{TTL: ttl, Expires: timeOf(r.ExpiresAt), Deadline: c.deadline(sent, confirmation{ttl: ttl, valid: ms(r.ValidForMs)})}, nil
}

// ReleaseByID frees a lock known only by its id and token. It is
// idempotent: released is false, with no error, when the lock was already
// gone, and it never frees a newer holder's lock. It blocks for the call,
// retried on other endpoints on transient failures.
func (c *Client) ReleaseByID(ctx context.Context, lockID string, token int64) (released bool, err error) {
	r, _, err := unary(ctx, c, "release", &v1.ReleaseRequest{LockId: lockID, FencingToken: token}, leasegatev1connect.LockServiceClient.Release)
	return r.GetReleased(), err
}
