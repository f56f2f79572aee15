package system

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/queue"
)

// Direct is the lock engine in this process, on a session per client, with
// no gateway in between: the floor under the gateway. Each acquire is the
// engine's TryAcquire on the client's session, each release its Release:
// the etcd transactions the gateway's engine issues for the same calls,
// with the engine's own CPU beside them. It never waits: a held name is
// ErrBusy.
//
// What the gateway adds on top is everything else: the Connect call and its
// HTTP/2 stream, routing and the circuit breaker, the wire's checks and the
// lock id's encoding.
type Direct struct {
	cli *clientv3.Client
	e   *queue.Engine
	ttl time.Duration
}

// NewDirect returns the engine floor on cli under prefix (which must not
// overlap the gateway's). Close closes the engine, not cli.
func NewDirect(cli *clientv3.Client, prefix string, ttl time.Duration) (*Direct, error) {
	cfg := queue.DefaultConfig()
	cfg.Prefix = prefix
	e, err := queue.New(cli, cfg)
	if err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}
	return &Direct{cli: cli, e: e, ttl: ttl}, nil
}

// Name implements System.
func (d *Direct) Name() string { return "direct" }

// Describe implements System.
func (d *Direct) Describe() string {
	return "the lock engine in process, without the gateway, on a session lease per client: the floor"
}

// NewClient implements System: a session the engine opens, kept alive by
// clientv3 as a gateway keeps a session alive for its client.
func (d *Direct) NewClient(ctx context.Context) (Client, error) {
	s, err := d.e.OpenSession(ctx, "loadtest", d.ttl)
	if err != nil {
		return nil, fmt.Errorf("direct: session: %w", err)
	}
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ka, err := d.cli.KeepAlive(kctx, s.Lease)
	if err != nil {
		cancel()
		_ = d.e.CloseSession(ctx, s.Lease, s.Secret)
		return nil, fmt.Errorf("direct: session keepalive: %w", err)
	}
	go func() {
		for range ka {
		}
	}()
	return &directClient{d: d, s: s, stop: cancel}, nil
}

// Close implements System: it closes the engine; the etcd client is not
// Direct's to close.
func (d *Direct) Close() error {
	d.e.Close()
	return nil
}

type directClient struct {
	d    *Direct
	s    queue.Session
	stop context.CancelFunc
	seq  int64
}

func (c *directClient) Acquire(ctx context.Context, name string, onEnqueued func()) (Held, error) {
	c.seq++
	res, err := c.d.e.TryAcquire(ctx, queue.AcquireRequest{
		Name: name, Session: c.s.Lease, SessionSecret: c.s.Secret, ClientID: "loadtest",
		RequestID: fmt.Sprintf("direct-%x-%d", int64(c.s.Lease), c.seq),
	})
	if err != nil {
		return nil, fmt.Errorf("direct: acquire: %w", err)
	}
	if onEnqueued != nil {
		onEnqueued()
	}
	if !res.Acquired {
		return nil, ErrBusy
	}
	return &directHeld{c: c, g: res.Grant}, nil
}

func (c *directClient) Close(ctx context.Context) error {
	c.stop()
	return c.d.e.CloseSession(ctx, c.s.Lease, c.s.Secret)
}

type directHeld struct {
	c *directClient
	g queue.Grant
}

func (h *directHeld) Release(ctx context.Context) error {
	released, err := h.c.d.e.Release(ctx, h.g.Handle, h.g.Token())
	if err != nil {
		return fmt.Errorf("direct: release: %w", err)
	}
	if !released {
		return fmt.Errorf("direct: release of %q: not held", h.g.Name)
	}
	return nil
}

func (h *directHeld) Order() int64 { return h.g.Revision }
