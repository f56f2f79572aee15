package system

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasegate/leasegate/shard"
)

// Mutex is etcd's concurrency.Mutex with a concurrency.Session per client:
// what Go users of etcd pick today.
type Mutex struct {
	cli    *clientv3.Client
	prefix string
	ttl    time.Duration
}

// NewMutex returns the Mutex system. It dials its own client to endpoints,
// whose KV is wrapped (see enqueueObserver) to learn when a Lock call's
// key is in place: concurrency.Mutex has no hook for that.
func NewMutex(endpoints []string, prefix string, ttl time.Duration) (*Mutex, error) {
	cli, err := shard.DialCluster("", endpoints)
	if err != nil {
		return nil, err
	}
	cli.KV = enqueueObserver{KV: cli.KV}
	return &Mutex{cli: cli, prefix: prefix, ttl: ttl}, nil
}

// Name implements System.
func (m *Mutex) Name() string { return "mutex" }

// Describe implements System.
func (m *Mutex) Describe() string {
	return fmt.Sprintf("etcd client/v3/concurrency.Mutex, a concurrency.Session (TTL %s) per client, a Mutex per acquire", m.ttl)
}

// Client is the etcd client the Mutexes use.
func (m *Mutex) Client() *clientv3.Client { return m.cli }

// NewClient implements System.
func (m *Mutex) NewClient(ctx context.Context) (Client, error) {
	s, err := concurrency.NewSession(m.cli, concurrency.WithTTL(int(m.ttl/time.Second)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("mutex: session: %w", err)
	}
	return &mutexClient{m: m, s: s}, nil
}

// Close implements System.
func (m *Mutex) Close() error { return m.cli.Close() }

type mutexClient struct {
	m *Mutex
	s *concurrency.Session
}

func (c *mutexClient) Acquire(ctx context.Context, name string, onEnqueued func()) (Held, error) {
	mu := concurrency.NewMutex(c.s, c.m.prefix+"/"+name)
	h := &mutexHeld{m: mu}
	enq := once(onEnqueued)
	ctx = context.WithValue(ctx, enqueueKey{}, func(rev int64) {
		h.rev = rev
		enq()
	})
	if err := mu.Lock(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

func (c *mutexClient) Close(context.Context) error { return c.s.Close() }

type mutexHeld struct {
	m   *concurrency.Mutex
	rev int64
}

func (h *mutexHeld) Release(ctx context.Context) error { return h.m.Unlock(ctx) }
func (h *mutexHeld) Order() int64                      { return h.rev }

type enqueueKey struct{}

// enqueueObserver wraps a KV so that the first transaction committed under a
// context carrying an enqueueKey callback reports its key's create revision:
// Mutex.Lock's first and only transaction is the one that puts the waiter's
// key (or finds it), so this is the moment and the place its turn is taken.
type enqueueObserver struct{ clientv3.KV }

func (o enqueueObserver) Txn(ctx context.Context) clientv3.Txn {
	t := o.KV.Txn(ctx)
	f, _ := ctx.Value(enqueueKey{}).(func(int64))
	if f == nil {
		return t
	}
	return &observedTxn{Txn: t, f: f}
}

type observedTxn struct {
	clientv3.Txn
	f func(rev int64)
}

func (t *observedTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *observedTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *observedTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *observedTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.f != nil {
		rev := resp.Header.Revision
		if !resp.Succeeded {
			if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
				rev = rr.Kvs[0].CreateRevision
			}
		}
		t.f(rev)
		t.f = nil
	}
	return resp, err
}
