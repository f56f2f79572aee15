package system

import (
	"context"
	"fmt"
	"time"

	"github.com/leasegate/leasegate/client"
)

// revisionMask keeps the create-revision bits of a fencing token.
const revisionMask = 1<<48 - 1

// Gateway drives a leasegate gateway through the Go SDK (Connect protocol,
// protobuf), with a session per client or a lease per lock.
type Gateway struct {
	c       *client.Client
	perLock bool
	ttl     time.Duration
}

// NewGateway returns the gateway system at urls. perLock gives every lock a
// lease of its own with the given TTL (renewed by the SDK); otherwise every
// client opens a session with that TTL and attaches its locks to it.
func NewGateway(urls []string, perLock bool, ttl time.Duration) (*Gateway, error) {
	c, err := client.New(urls, client.WithClientID("loadtest"))
	if err != nil {
		return nil, err
	}
	return &Gateway{c: c, perLock: perLock, ttl: ttl}, nil
}

// Name implements System.
func (g *Gateway) Name() string {
	if g.perLock {
		return "gateway-perlock"
	}
	return "gateway-session"
}

// Describe implements System.
func (g *Gateway) Describe() string {
	if g.perLock {
		return fmt.Sprintf("leasegate via the Go SDK (Connect, protobuf, HTTP/2); a lease of its own per lock, TTL %s", g.ttl)
	}
	return fmt.Sprintf("leasegate via the Go SDK (Connect, protobuf, HTTP/2); one session per client, TTL %s", g.ttl)
}

// SDK is the shared SDK client.
func (g *Gateway) SDK() *client.Client { return g.c }

// NewClient implements System.
func (g *Gateway) NewClient(ctx context.Context) (Client, error) {
	if g.perLock {
		return &gatewayClient{g: g}, nil
	}
	s, err := g.c.OpenSession(ctx, client.WithTTL(g.ttl))
	if err != nil {
		return nil, err
	}
	return &gatewayClient{g: g, s: s}, nil
}

// Close implements System.
func (g *Gateway) Close() error { return g.c.Close() }

type gatewayClient struct {
	g *Gateway
	s *client.Session // nil per lock
}

func (c *gatewayClient) Acquire(ctx context.Context, name string, onEnqueued func()) (Held, error) {
	enq := once(onEnqueued)
	opts := []client.AcquireOption{client.WithOnQueued(func(int64) { enq() })}
	var l *client.Lock
	var err error
	if c.s != nil {
		l, err = c.s.Acquire(ctx, name, opts...)
	} else {
		l, err = c.g.c.Acquire(ctx, name, append(opts, client.WithTTL(c.g.ttl))...)
	}
	if err != nil {
		return nil, err
	}
	return gatewayHeld{l}, nil
}

func (c *gatewayClient) Close(ctx context.Context) error {
	if c.s == nil {
		return nil
	}
	return c.s.Close(ctx)
}

type gatewayHeld struct{ l *client.Lock }

func (h gatewayHeld) Release(ctx context.Context) error { return h.l.Release(ctx) }
func (h gatewayHeld) Order() int64                      { return h.l.Token() & revisionMask }

// Err reports the lock's loss (nil while held).
func (h gatewayHeld) Err() error { return h.l.Err() }
