package system

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasegate/leasegate/queue"
)

// Direct issues the lock engine's enqueue and release transactions
// (queue/acquire.go Engine.enqueue, queue/renew.go Engine.Release) with
// clientv3 on a session lease, and nothing else: the floor under the
// gateway. The key layout, value header and ownership compares are the
// engine's own (queue.NamePrefix, queue.WaiterID, queue.SessionKey,
// queue.ValueHeader, queue.OwnerCmps). It never waits: a held name is
// ErrBusy.
//
// What the gateway adds on top is everything else: the Connect call and its
// HTTP/2 stream, routing and the circuit breaker, validation, a fresh secret
// and waiter id per acquire, and the session keepalive the engine sends
// with every session acquire to learn the grant's deadline.
type Direct struct {
	cli    *clientv3.Client
	prefix string
	ttl    time.Duration
}

// NewDirect returns the direct-transaction floor on cli under prefix (which
// must not overlap the gateway's).
func NewDirect(cli *clientv3.Client, prefix string, ttl time.Duration) *Direct {
	return &Direct{cli: cli, prefix: prefix, ttl: ttl}
}

// Name implements System.
func (d *Direct) Name() string { return "direct" }

// Describe implements System.
func (d *Direct) Describe() string {
	return "the engine's enqueue and release etcd transactions issued with clientv3, on a session lease per client: the floor"
}

// NewClient implements System: a session lease kept alive by clientv3 and
// the session key that proves it, as Engine.OpenSession writes them.
func (d *Direct) NewClient(ctx context.Context) (Client, error) {
	s, err := concurrency.NewSession(d.cli, concurrency.WithTTL(int(d.ttl/time.Second)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("direct: session: %w", err)
	}
	secret, err := queue.NewSecret()
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("direct: %w", err)
	}
	sessKey := queue.SessionKey(d.prefix, s.Lease())
	if _, err := d.cli.Put(ctx, sessKey, queue.ValueHeader(secret)+`{"c":"loadtest"}`, clientv3.WithLease(s.Lease())); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("direct: session key: %w", err)
	}
	return &directClient{d: d, s: s, secret: secret, sessKey: sessKey, keys: map[string]*directKey{}}, nil
}

// Close implements System; the client is not Direct's to close.
func (d *Direct) Close() error { return nil }

type directClient struct {
	d       *Direct
	s       *concurrency.Session
	secret  queue.Secret
	sessKey string
	keys    map[string]*directKey
}

// directKey is one name's waiter key and value, built once per client and
// name (the engine builds them per acquire; that CPU is the gateway's).
type directKey struct {
	prefix, key, value string
	secret             queue.Secret
}

func (c *directClient) keyFor(name string) *directKey {
	if k, ok := c.keys[name]; ok {
		return k
	}
	var secret queue.Secret
	_, _ = rand.Read(secret[:])
	reqID := fmt.Sprintf("direct-%x-%s", int64(c.s.Lease()), name)
	meta, _ := json.Marshal(map[string]any{
		"c": "loadtest", "t": int64(c.d.ttl / time.Second), "e": 1, "ss": true,
		"s": hex.EncodeToString(secret[:]), "q": time.Now().UnixMilli(),
	})
	prefix := queue.NamePrefix(c.d.prefix, name)
	k := &directKey{prefix: prefix, key: prefix + queue.WaiterID(reqID), value: queue.ValueHeader(secret) + string(meta), secret: secret}
	c.keys[name] = k
	return k
}

func (c *directClient) Acquire(ctx context.Context, name string, onEnqueued func()) (Held, error) {
	k := c.keyFor(name)
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k.key), "=", 0)}, queue.OwnerCmps(c.sessKey, c.secret)...)
	resp, err := c.d.cli.Txn(ctx).If(cmps...).Then(
		clientv3.OpPut(k.key, k.value, clientv3.WithLease(c.s.Lease())),
		clientv3.OpGet(k.prefix, clientv3.WithFirstCreate()...),
	).Else(
		clientv3.OpGet(k.key),
		clientv3.OpGet(k.prefix, clientv3.WithFirstCreate()...),
		clientv3.OpGet(c.sessKey),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("direct: enqueue: %w", err)
	}
	if onEnqueued != nil {
		onEnqueued()
	}
	rr := resp.Responses[1].GetResponseRange()
	if !resp.Succeeded || rr == nil || len(rr.Kvs) == 0 || rr.Kvs[0].CreateRevision != resp.Header.Revision {
		return nil, ErrBusy
	}
	return &directHeld{c: c, k: k, rev: resp.Header.Revision}, nil
}

func (c *directClient) Close(context.Context) error { return c.s.Close() }

type directHeld struct {
	c   *directClient
	k   *directKey
	rev int64
}

func (h *directHeld) Release(ctx context.Context) error {
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(h.k.key), "=", h.rev)}, queue.OwnerCmps(h.k.key, h.k.secret)...)
	resp, err := h.c.d.cli.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(h.k.key)).Else(clientv3.OpGet(h.k.key)).Commit()
	if err != nil {
		return fmt.Errorf("direct: release: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("direct: release of %s: compare failed", h.k.key)
	}
	return nil
}

func (h *directHeld) Order() int64 { return h.rev }
