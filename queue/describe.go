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
	// Holder is nil when the name is free.
	Holder *Holder
	// Waiters counts the waiters behind the holder.
	Waiters int64
	// Revision is the etcd revision the snapshot was read at.
	Revision int64
}

// Describe reads a name's holder and queue length.
func (e *Engine) Describe(ctx context.Context, name string) (Description, error) {
	defer e.enter()()
	if err := ValidateName(name); err != nil {
		return Description{}, err
	}
	prefix := e.keys.namePrefix(name)
	resp, err := e.cli.Txn(ctx).Then(
		clientv3.OpGet(prefix, clientv3.WithFirstCreate()...),
		clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return Description{}, fmt.Errorf("queue: describe: %w", err)
	}
	d := Description{Name: name, Revision: resp.Header.Revision}
	first := firstKV(resp.Responses[0])
	if first == nil {
		return d, nil
	}
	if d.Holder, err = e.holderInfo(ctx, first); err != nil {
		return Description{}, err
	}
	d.Waiters = max(resp.Responses[1].GetResponseRange().Count-1, 0)
	return d, nil
}

// holderInfo decodes a holder key and asks etcd for its lease's remaining TTL.
func (e *Engine) holderInfo(ctx context.Context, kv *mvccpb.KeyValue) (*Holder, error) {
	if kv == nil {
		return nil, nil
	}
	_, meta, err := decodeValue(kv.Value)
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
// name right now, and the live holder's token (0 when free). The answer can
// be stale by the time a write that relies on it lands; a resource that can
// store the highest token it accepted should check that instead.
func (e *Engine) CheckFence(ctx context.Context, name string, token int64) (live bool, current int64, err error) {
	defer e.enter()()
	if err := ValidateName(name); err != nil {
		return false, 0, err
	}
	resp, err := e.cli.Get(ctx, e.keys.namePrefix(name), clientv3.WithFirstCreate()...)
	if err != nil {
		return false, 0, fmt.Errorf("queue: check fence: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return false, 0, nil
	}
	_, meta, err := decodeValue(resp.Kvs[0].Value)
	if err != nil {
		return false, 0, err
	}
	current = Token(meta.Epoch, resp.Kvs[0].CreateRevision)
	return current == token, current, nil
}
