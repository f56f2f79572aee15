package system

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Redsync is github.com/go-redsync/redsync/v4 on one redis-server (single
// instance Redlock), with redsync's default retry delay (50–250 ms, random)
// and as many tries as the caller's context allows.
type Redsync struct {
	name string
	note string
	rdb  *redis.Client
	rs   *redsync.Redsync
	ttl  time.Duration
}

// NewRedsync returns the redsync system on the redis-server at addr. name
// tells the server's persistence apart in results ("redsync-always");
// poolSize should cover the workers so they do not queue for connections.
func NewRedsync(name, note, addr string, ttl time.Duration, poolSize int) *Redsync {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize, MinIdleConns: min(poolSize, 64)})
	return &Redsync{name: name, note: note, rdb: rdb, rs: redsync.New(goredis.NewPool(rdb)), ttl: ttl}
}

// Name implements System.
func (r *Redsync) Name() string { return r.name }

// Describe implements System.
func (r *Redsync) Describe() string {
	return fmt.Sprintf("redsync v4 mutex (expiry %s) on redis-server, %s", r.ttl, r.note)
}

// NewClient implements System; redsync clients share the connection pool.
func (r *Redsync) NewClient(context.Context) (Client, error) { return redsyncClient{r}, nil }

// Close implements System.
func (r *Redsync) Close() error { return r.rdb.Close() }

type redsyncClient struct{ r *Redsync }

// Acquire reports the place taken at once: redsync has no line, waiters
// retry until one of them wins.
func (c redsyncClient) Acquire(ctx context.Context, name string, onEnqueued func()) (Held, error) {
	m := c.r.rs.NewMutex(name, redsync.WithExpiry(c.r.ttl), redsync.WithTries(math.MaxInt32))
	if onEnqueued != nil {
		onEnqueued()
	}
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return nil, err
	}
	return redsyncHeld{m}, nil
}

func (redsyncClient) Close(context.Context) error { return nil }

type redsyncHeld struct{ m *redsync.Mutex }

func (h redsyncHeld) Release(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("redsync: unlock found the lock expired or taken")
	}
	return nil
}

func (redsyncHeld) Order() int64 { return 0 }
