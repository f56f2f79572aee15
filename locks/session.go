package locks

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// A session over the fleet is one lease per shard, all proven by one
// secret. Each lease lives and dies on its own: a shard that is down costs
// the locks on that shard, never those on the others. So every session
// call works on every shard it concerns at once and reports each shard's
// outcome; what they add up to is the caller's to say.

// LeaseOutcome is what one session call did on one shard.
type LeaseOutcome struct {
	// Shard names the shard.
	Shard string
	// Renewal is the lease's TTL, deadline and validity when Err is nil.
	Renewal queue.Renewal
	// Opened marks a lease this call opened (as opposed to renewed or
	// revoked); Lease is that lease.
	Opened bool
	Lease  clientv3.LeaseID
	// Err is the shard's failure.
	Err error
}

// Session is a session's part of a session call.
type Session struct {
	// Tenant owns the session.
	Tenant string
	// Secret proves the session on every shard.
	Secret queue.Secret
	// Leases are the leases the session holds.
	Leases Leases
	// KeyCap caps the tenant's keys on each shard a lease is opened on
	// (ErrKeyCap): a session is a stored thing the tenant creates, and
	// counts like a lock. 0 is no cap.
	KeyCap int
}

// Known reports ErrUnknownShard for the first of shards that is not a
// cluster of the map this router follows. It reads no etcd.
func (r *Router) Known(shards ...string) error {
	for _, sh := range shards {
		if _, ok := r.Backend(sh); !ok {
			return fmt.Errorf("%w %q", ErrUnknownShard, sh)
		}
	}
	return nil
}

// Opened is a new session: its secret and each shard's outcome.
type Opened struct {
	// Secret proves the session on every shard.
	Secret queue.Secret
	// Shards holds each shard's outcome, in map order.
	Shards []LeaseOutcome
}

// OpenSession opens a lease of ttl for clientID on every shard of the map,
// all proven by a new secret (s.Secret and s.Leases are unused), under
// s.KeyCap; it reports each shard's outcome. The shards work at once, each
// bounded by RequestTimeout and by a margin before ctx's deadline
// (boundEach).
func (r *Router) OpenSession(ctx context.Context, s Session, clientID string, ttl time.Duration) (Opened, error) {
	ctx, cancel := r.boundEach(ctx)
	defer cancel()
	secret, err := queue.NewSecret()
	if err != nil {
		return Opened{}, err
	}
	targets, err := r.All(s.Tenant)
	if err != nil {
		return Opened{}, err
	}
	s.Secret = secret
	return Opened{Secret: secret, Shards: each(len(targets), func(i int) LeaseOutcome {
		return r.grant(ctx, targets[i], s, clientID, ttl)
	})}, nil
}

// ExtendSession opens the session's lease on each of shards it holds none
// on; on a shard it holds one on, it renews it, or with replace revokes it
// and opens a new one (so the locks of a lease the client gave up as lost
// are released, never carried over). Each shard's outcome is reported; the
// shards work at once, as OpenSession's do. A shard this router does not
// know is ErrUnknownShard (Known).
func (r *Router) ExtendSession(ctx context.Context, s Session, shards []string, replace bool, clientID string, ttl time.Duration) ([]LeaseOutcome, error) {
	targets := make([]Target, len(shards))
	for i, sh := range shards {
		var err error
		if targets[i], err = r.Lookup(sh, s.Tenant); err != nil {
			return nil, err
		}
	}
	ctx, cancel := r.boundEach(ctx)
	defer cancel()
	return each(len(targets), func(i int) LeaseOutcome {
		t := targets[i]
		lease, listed := s.Leases.Lease(t.Shard)
		switch {
		case !listed:
			return r.grant(ctx, t, s, clientID, ttl)
		case !replace:
			return r.keepAlive(ctx, s, t.Shard, lease)
		}
		if o := r.revoke(ctx, s, t.Shard, lease); o.Err != nil {
			return o
		}
		return r.grant(ctx, t, s, clientID, ttl)
	}), nil
}

// KeepAliveSession renews the session's leases on shards, each on its
// own: a shard that is down or whose lease is gone is reported, and the
// others are renewed all the same.
func (r *Router) KeepAliveSession(ctx context.Context, s Session, shards []string) []LeaseOutcome {
	return r.eachLease(ctx, s, shards, r.keepAlive)
}

// CloseSession revokes the session's leases on shards, releasing every
// lock on them; a lease already gone counts as revoked.
func (r *Router) CloseSession(ctx context.Context, s Session, shards []string) []LeaseOutcome {
	return r.eachLease(ctx, s, shards, r.revoke)
}

// eachLease runs fn on the session's lease on each of shards at once,
// bounded as OpenSession's shards are.
func (r *Router) eachLease(ctx context.Context, s Session, shards []string, fn func(context.Context, Session, string, clientv3.LeaseID) LeaseOutcome) []LeaseOutcome {
	ctx, cancel := r.boundEach(ctx)
	defer cancel()
	return each(len(shards), func(i int) LeaseOutcome {
		lease, _ := s.Leases.Lease(shards[i])
		return fn(ctx, s, shards[i], lease)
	})
}

// RevokeOpened revokes, best effort and one shard after the other within
// one RequestTimeout, the leases outs opened: a failed open or extension
// leaves no half a session behind.
func (r *Router) RevokeOpened(s Session, outs []LeaseOutcome) {
	ctx, cancel := clock.WithTimeoutCause(context.Background(), r.cfg.Clock, r.cfg.RequestTimeout, nil)
	defer cancel()
	for _, o := range outs {
		if o.Err != nil || !o.Opened {
			continue
		}
		if t, err := r.Lookup(o.Shard, s.Tenant); err == nil {
			_ = t.Engine.CloseSession(ctx, o.Lease, s.Secret)
		}
	}
}

// grant opens the session's lease on t.
func (r *Router) grant(ctx context.Context, t Target, s Session, clientID string, ttl time.Duration) LeaseOutcome {
	o := LeaseOutcome{Shard: t.Shard, Opened: true}
	if o.Err = r.checkKeys(ctx, s.Tenant, t, s.KeyCap); o.Err != nil {
		return o
	}
	var l queue.Session
	l, o.Err = do(ctx, t, func(ctx context.Context) (queue.Session, error) {
		return t.Engine.OpenSessionWithSecret(ctx, clientID, ttl, s.Secret)
	})
	if o.Err == nil {
		o.Lease, o.Renewal = l.Lease, queue.Renewal{TTL: l.TTL, Deadline: l.Deadline, Valid: l.Valid}
	}
	return o
}

// keepAlive renews the session's lease on shard sh.
func (r *Router) keepAlive(ctx context.Context, s Session, sh string, lease clientv3.LeaseID) LeaseOutcome {
	t, err := r.Lookup(sh, s.Tenant)
	if errors.Is(err, ErrUnknownShard) {
		// A shard this gateway does not know (a stale map, or a shard
		// removed since) cannot confirm the lease: unavailable here, and
		// lost to the client once its deadline passes unconfirmed.
		err = shard.Unavailable(err)
	}
	o := LeaseOutcome{Shard: sh, Err: err}
	if err != nil {
		return o
	}
	o.Renewal, o.Err = do(ctx, t, func(ctx context.Context) (queue.Renewal, error) {
		return t.Engine.KeepAliveSession(ctx, lease, s.Secret)
	})
	return o
}

// revoke revokes the session's lease on shard sh; a lease already gone
// counts as revoked.
func (r *Router) revoke(ctx context.Context, s Session, sh string, lease clientv3.LeaseID) LeaseOutcome {
	t, err := r.Lookup(sh, s.Tenant)
	if err == nil {
		err = t.Backend.freeing(ctx, func(ctx context.Context) error {
			return t.Engine.CloseSession(ctx, lease, s.Secret)
		})
	}
	return LeaseOutcome{Shard: sh, Err: err}
}
