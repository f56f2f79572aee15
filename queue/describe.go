package queue

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Description is a snapshot of one name.
type Description struct {
	// Name is the lock name.
	Name string
	// Holder is nil when the name is free; for a semaphore it is the first
	// of Holders.
	Holder *Holder
	// Holders lists every holder, in create order: one for a lock, up to
	// Limit for a semaphore.
	Holders []*Holder
	// Limit is the name's semaphore limit (1 for a lock); 0 when the name
	// has no keys.
	Limit int
	// Waiters counts the waiters behind the holders.
	Waiters int64
	// DelayUntil, when set, is when the pending lock-delay of a holder
	// whose lease expired ends: no one is granted the name before then
	// (delay.go). For a lock-delay no gateway has stamped yet it is a
	// delay's length from now, when the next acquire or TryAcquire would
	// stamp it.
	DelayUntil time.Time
	// Revision is the etcd revision the snapshot was read at.
	Revision int64
}

// Describe reads a name's holders, limit and queue length. The first key
// names the limit; a semaphore's holders are read at the same revision.
func (e *Engine) Describe(ctx context.Context, name string) (Description, error) {
	if err := ValidateName(name); err != nil {
		return Description{}, err
	}
	prefix := e.keys.namePrefix(name)
	resp, err := e.cli.Txn(ctx).Then(
		clientv3.OpGet(prefix, clientv3.WithFirstCreate()...),
		clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(e.keys.delayPrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return Description{}, fmt.Errorf("queue: describe: %w", err)
	}
	d := Description{Name: name, Revision: resp.Header.Revision}
	if resp.Responses[2].GetResponseRange().Count > 0 {
		recs, err := e.pendingDelays(ctx, name)
		if err != nil {
			return Description{}, err
		}
		now := e.cfg.Clock.Now()
		for _, rec := range recs {
			end := rec.endFor(e)
			if end.IsZero() {
				end = now.Add(rec.d)
			}
			if end.After(now) && end.After(d.DelayUntil) {
				d.DelayUntil = end
			}
		}
	}
	first := firstKV(resp.Responses[0])
	if first == nil {
		return d, nil
	}
	held, err := e.holderKVs(ctx, prefix, first, resp.Header.Revision)
	if err != nil {
		return Description{}, err
	}
	d.Limit = limitOf(first.Value)
	for _, kv := range held {
		h, err := e.holderInfo(ctx, kv)
		if err != nil {
			return Description{}, err
		}
		d.Holders = append(d.Holders, h)
	}
	d.Holder = d.Holders[0]
	d.Waiters = max(resp.Responses[1].GetResponseRange().Count-int64(len(held)), 0)
	return d, nil
}

// holderKVs returns the keys that hold a name whose first key, read at
// rev, is first: by the grant rule (holders), among the first N keys by
// create revision at rev, N being the first key's limit.
func (e *Engine) holderKVs(ctx context.Context, prefix string, first *mvccpb.KeyValue, rev int64) ([]*mvccpb.KeyValue, error) {
	n := limitOf(first.Value)
	if n <= 1 {
		return []*mvccpb.KeyValue{first}, nil
	}
	resp, err := e.cli.Get(ctx, prefix, append(withFirstN(n), clientv3.WithRev(rev))...)
	if err != nil {
		return nil, fmt.Errorf("queue: read holders: %w", err)
	}
	return heldKVs(resp.Kvs), nil
}

// holderInfo decodes a holder key and asks etcd for its lease's remaining TTL.
func (e *Engine) holderInfo(ctx context.Context, kv *mvccpb.KeyValue) (*Holder, error) {
	if kv == nil {
		return nil, nil
	}
	meta, err := decodeValue(kv.Value)
	if err != nil {
		return nil, err
	}
	h := &Holder{ClientID: meta.ClientID, Token: Token(meta.Epoch, kv.CreateRevision), TTL: time.Duration(meta.TTL) * time.Second}
	now := e.cfg.Clock.Now()
	ttl, err := e.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		return nil, fmt.Errorf("queue: read holder lease: %w", err)
	}
	h.Expires = now.Add(time.Duration(max(ttl.TTL, 0)) * time.Second)
	if ttl.GrantedTTL > 0 {
		h.TTL = time.Duration(ttl.GrantedTTL) * time.Second
	}
	return h, nil
}

// CheckFence reports whether token is the live holder's fencing token for
// name right now, and the live holder's token (0 when free). For a
// semaphore, token is live when it is any holder's; current is then token,
// and otherwise the first holder's. The answer can
// be stale by the time a write that relies on it lands; a resource that can
// store the highest token it accepted should check that instead.
func (e *Engine) CheckFence(ctx context.Context, name string, token int64) (live bool, current int64, err error) {
	if err := ValidateName(name); err != nil {
		return false, 0, err
	}
	prefix := e.keys.namePrefix(name)
	resp, err := e.cli.Get(ctx, prefix, clientv3.WithFirstCreate()...)
	if err != nil {
		return false, 0, fmt.Errorf("queue: check fence: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return false, 0, nil
	}
	held, err := e.holderKVs(ctx, prefix, resp.Kvs[0], resp.Header.Revision)
	if err != nil {
		return false, 0, err
	}
	for i, kv := range held {
		meta, err := decodeValue(kv.Value)
		if err != nil {
			return false, 0, err
		}
		t := Token(meta.Epoch, kv.CreateRevision)
		if i == 0 {
			current = t
		}
		if t == token {
			return true, t, nil
		}
	}
	return false, current, nil
}
