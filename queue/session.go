package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Session is a lease shared by many locks of one client: renewal cost grows
// with clients, not with locks.
type Session struct {
	// Lease is the session's etcd lease.
	Lease clientv3.LeaseID
	// Secret proves ownership of the session.
	Secret Secret
	// TTL is the effective lease TTL.
	TTL time.Duration
	// Deadline is conservative: when the last confirming request was sent,
	// plus TTL.
	Deadline time.Time
	// Valid is how long after the call began the lease is certain to live
	// (see Renewal.Valid).
	Valid time.Duration
}

// OpenSession grants a session lease and records its owner's secret under
// <prefix>/sessions/, attached to the lease itself.
func (e *Engine) OpenSession(ctx context.Context, clientID string, ttl time.Duration) (Session, error) {
	secret, err := NewSecret()
	if err != nil {
		return Session{}, err
	}
	return e.OpenSessionWithSecret(ctx, clientID, ttl, secret)
}

// OpenSessionWithSecret is OpenSession with a caller-chosen secret, so one
// secret can prove a session that spans several clusters.
func (e *Engine) OpenSessionWithSecret(ctx context.Context, clientID string, ttl time.Duration, secret Secret) (Session, error) {
	if err := ValidateClientID(clientID); err != nil {
		return Session{}, fieldErr("ClientID", err)
	}
	began := e.cfg.Clock.Now()
	sec, err := e.cfg.ttlSeconds(ttl)
	if err != nil {
		return Session{}, fieldErr("TTL", err)
	}
	sent := e.cfg.Clock.Now()
	g, err := e.cli.Grant(ctx, sec)
	if err != nil {
		return Session{}, fmt.Errorf("queue: grant session lease: %w", err)
	}
	meta, _ := json.Marshal(sessionMeta{ClientID: clientID, TTL: g.TTL})
	if _, err := e.cli.Put(ctx, e.keys.session(g.ID), valueHeader(secret)+string(meta), clientv3.WithLease(g.ID)); err != nil {
		e.revokeLater(ctx, g.ID)
		return Session{}, fmt.Errorf("queue: record session: %w", err)
	}
	d := time.Duration(g.TTL) * time.Second
	e.learnSessionTTL(g.ID, d)
	return Session{Lease: g.ID, Secret: secret, TTL: d, Deadline: sent.Add(d), Valid: sent.Add(d).Sub(began)}, nil
}

// KeepAliveSession proves ownership of a session and renews its lease, and
// with it every lock attached.
func (e *Engine) KeepAliveSession(ctx context.Context, lease clientv3.LeaseID, secret Secret) (Renewal, error) {
	began := e.cfg.Clock.Now()
	if err := e.proveSession(ctx, lease, secret); err != nil {
		return Renewal{}, err
	}
	ttl, deadline, err := e.renewLease(ctx, lease)
	if errors.Is(err, errLeaseNotFound) {
		return Renewal{}, fmt.Errorf("%w: session lease expired", ErrSessionLost)
	}
	if err != nil {
		return Renewal{}, fmt.Errorf("queue: keepalive session: %w", err)
	}
	return Renewal{TTL: ttl, Deadline: deadline, Valid: deadline.Sub(began)}, nil
}

// CloseSession revokes a session lease, releasing every lock attached. Closing
// a session that is already gone is not an error. It deletes the session's
// record, proving the secret, before it revokes the lease: a lock that goes
// after its session's record went is a clean end, not a loss (loss.go).
func (e *Engine) CloseSession(ctx context.Context, lease clientv3.LeaseID, secret Secret) error {
	key := e.keys.session(lease)
	resp, err := e.cli.Txn(ctx).If(ownerCmps(key, secret)...).Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return fmt.Errorf("queue: close session: %w", err)
	}
	if !resp.Succeeded {
		if firstKV(resp.Responses[0]) != nil {
			return fmt.Errorf("%w: the session id's secret does not match", ErrNotOwner)
		}
		// Gone, or closed by a close whose revoke failed: without its
		// record nothing proves the lease is the caller's, and nothing can
		// renew it (KeepAliveSession proves the record), so it lapses.
		return nil
	}
	// No key joins the lease now (every acquire proves the record): its
	// locks' records go before the locks do, a clean end (loss.go).
	if err := e.clearSessionRecords(ctx, lease); err != nil {
		return err
	}
	if _, err := e.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("queue: revoke session: %w", err)
	}
	return nil
}

// clearSessionRecords deletes the delay and holder records of the locks on
// a session's lease, each while it is its lock's, a batch of locks per
// transaction.
func (e *Engine) clearSessionRecords(ctx context.Context, lease clientv3.LeaseID) error {
	ttl, err := e.cli.TimeToLive(ctx, lease, clientv3.WithAttachedKeys())
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil
		}
		return fmt.Errorf("queue: close session: list its locks: %w", err)
	}
	locks := e.keys.locks()
	var keys []string
	for _, k := range ttl.Keys {
		if seg, wid, ok := strings.Cut(strings.TrimPrefix(string(k), locks), "/"); ok && strings.HasPrefix(string(k), locks) && seg != "" && !strings.Contains(wid, "/") {
			keys = append(keys, string(k))
		}
	}
	const batch = 40 // two operations per lock, well below etcd's limit per transaction
	for i := 0; i < len(keys); i += batch {
		part := keys[i:min(i+batch, len(keys))]
		gets := make([]clientv3.Op, len(part))
		for j, k := range part {
			gets[j] = clientv3.OpGet(k, clientv3.WithKeysOnly())
		}
		resp, err := e.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return fmt.Errorf("queue: close session: read its locks: %w", err)
		}
		var ops []clientv3.Op
		for j, k := range part {
			kv := firstKV(resp.Responses[j])
			if kv == nil {
				continue
			}
			seg, wid, _ := strings.Cut(strings.TrimPrefix(k, locks), "/")
			name, err := unescapeName(seg)
			if err != nil {
				continue
			}
			ops = append(ops, e.releaseDelayOps(Handle{Name: name, WaiterID: wid, Revision: kv.CreateRevision})...)
		}
		if len(ops) == 0 {
			continue
		}
		if _, err := e.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("queue: close session: clear its locks' records: %w", err)
		}
	}
	return nil
}

func (e *Engine) proveSession(ctx context.Context, lease clientv3.LeaseID, secret Secret) error {
	key := e.keys.session(lease)
	resp, err := e.cli.Txn(ctx).If(ownerCmps(key, secret)...).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return fmt.Errorf("queue: check session: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	if firstKV(resp.Responses[0]) != nil {
		return fmt.Errorf("%w: the session id's secret does not match", ErrNotOwner)
	}
	return fmt.Errorf("%w: session %x is unknown or expired", ErrSessionLost, int64(lease))
}
