package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/leasegate/leasegate/fence"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Kinds of clientEvent, in the order client A reports them.
const (
	// evAcquired: A holds the lock; Token and TTLMs are set.
	evAcquired = "acquired"
	// evRenewFailed: a renewal failed and A's renewal loop stopped; Error
	// says why. A does not re-check before its write: a pause can fall
	// between any check and the write, which is why the store must fence.
	evRenewFailed = "renew-failed"
	// evWrite: A's write landed or was refused; Accepted, Stale, Token,
	// Highest and Error say how.
	evWrite = "write"
	// evError: A failed and exits non-zero; Error says why.
	evError = "error"
)

// clientEvent is one JSON line client A prints on its stdout.
type clientEvent struct {
	Event string `json:"event"`
	// Token is A's fencing token (evAcquired) or its write's (evWrite).
	Token int64 `json:"token,omitempty"`
	// TTLMs is the granted lease TTL (evAcquired).
	TTLMs int64 `json:"ttlMs,omitempty"`
	// Accepted: the store took A's write (evWrite).
	Accepted bool `json:"accepted,omitempty"`
	// Stale: the store refused A's write with a fence.StaleTokenError.
	Stale bool `json:"stale,omitempty"`
	// Highest is the store's highest token when it refused A (evWrite).
	Highest int64 `json:"highest,omitempty"`
	// Error is the failure's message.
	Error string `json:"error,omitempty"`
}

// fencingClientConfig configures client A, `fencing fencing-client`.
type fencingClientConfig struct {
	// Endpoint is the gateway's base URL. Required.
	Endpoint string
	// Order is the order id to write; the lock is lockOf(Order). Default "42".
	Order string
	// DB is the SQLite orders database. Required.
	DB string
	// TTL is the lease TTL to ask for, at least 1 s. Default 2 s.
	TTL time.Duration
}

// Validate reports the first invalid field, naming the value and what is
// allowed.
func (c fencingClientConfig) Validate() error {
	switch {
	case !strings.HasPrefix(c.Endpoint, "http://") && !strings.HasPrefix(c.Endpoint, "https://"):
		return fmt.Errorf("--endpoint %q: want an http:// or https:// URL", c.Endpoint)
	case c.Order == "":
		return errors.New("--order is empty: want an order id")
	case c.DB == "":
		return errors.New("--db is empty: want the path of the SQLite orders database")
	case c.TTL < time.Second:
		return fmt.Errorf("--ttl %s: want at least 1s", c.TTL)
	}
	return nil
}

// runFencingClient is client A: it acquires lockOf(cfg.Order), reports its
// token, renews in the background, and blocks until the line "go" arrives on
// in. Then it writes statusA with its token, without checking the lock
// again, and reports the outcome. Events go to out as JSON lines; a failure
// is reported as evError too.
func runFencingClient(ctx context.Context, cfg fencingClientConfig, in io.Reader, out io.Writer) error {
	rep := &reporter{enc: json.NewEncoder(out)}
	err := fencingClient(ctx, cfg, in, rep)
	if err != nil {
		rep.send(clientEvent{Event: evError, Error: err.Error()})
	}
	return err
}

func fencingClient(ctx context.Context, cfg fencingClientConfig, in io.Reader, rep *reporter) error {
	// Open the store first, so the pause falls right before the write.
	db, orders, err := openOrders(ctx, cfg.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	lc, hc := newLockClient(cfg.Endpoint)
	defer hc.CloseIdleConnections()

	g, err := tryAcquire(ctx, lc, lockOf(cfg.Order), cfg.TTL, "client-A")
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	var renewals sync.WaitGroup
	defer func() {
		cancel()
		renewals.Wait()
	}()
	renewals.Go(func() { keepRenewing(rctx, lc, g, rep) })
	rep.send(clientEvent{Event: evAcquired, Token: g.FencingToken, TTLMs: g.TtlMs})

	// The demo pauses this process here, between A's decision to write
	// and the write itself.
	line, err := bufio.NewReader(in).ReadString('\n')
	if strings.TrimSpace(line) != "go" {
		return fmt.Errorf("waiting for the line \"go\" on stdin: got %q (%v)", line, err)
	}
	ev := clientEvent{Event: evWrite, Token: g.FencingToken}
	err = orders.Put(ctx, cfg.Order, statusA, g.FencingToken)
	var se *fence.StaleTokenError
	switch {
	case err == nil:
		ev.Accepted = true
	case errors.As(err, &se):
		ev.Stale, ev.Token, ev.Highest, ev.Error = true, se.Token, se.Highest, err.Error()
	default:
		ev.Error = err.Error()
	}
	rep.send(ev)
	return nil
}

// keepRenewing renews g every third of its TTL until ctx is done or a
// renewal fails, which it reports.
func keepRenewing(ctx context.Context, lc leasegatev1connect.LockServiceClient, g *v1.Granted, rep *reporter) {
	tick := time.NewTicker(time.Duration(g.TtlMs) * time.Millisecond / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		_, err := lc.Renew(cctx, connect.NewRequest(&v1.RenewRequest{LockId: g.LockId, FencingToken: g.FencingToken, TtlMs: g.TtlMs}))
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				rep.send(clientEvent{Event: evRenewFailed, Error: err.Error()})
			}
			return
		}
	}
}

// reporter writes events as JSON lines, one at a time.
type reporter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (r *reporter) send(ev clientEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(ev) // the demo reads it; if it is gone, nobody can
}

// openOrders opens the SQLite database at path with a fenced orders table.
// The caller closes the *sql.DB.
func openOrders(ctx context.Context, path string) (*sql.DB, *fence.Orders, error) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return nil, nil, fmt.Errorf("open orders database %s: %w", path, err)
	}
	g, err := fence.NewSQLGuard(ctx, db, fence.SQLConfig{Dialect: fence.SQLite})
	if err == nil {
		var orders *fence.Orders
		if orders, err = fence.NewOrders(ctx, g, ""); err == nil {
			return db, orders, nil
		}
	}
	_ = db.Close()
	return nil, nil, fmt.Errorf("orders database %s: %w", path, err)
}

// newLockClient returns a Connect client of the gateway at baseURL over
// HTTP/2 without TLS, and its HTTP client for closing idle connections.
func newLockClient(baseURL string) (leasegatev1connect.LockServiceClient, *http.Client) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	return leasegatev1connect.NewLockServiceClient(hc, baseURL), hc
}

// tryAcquire takes name if it is free, with ttl and clientID.
func tryAcquire(ctx context.Context, lc leasegatev1connect.LockServiceClient, name string, ttl time.Duration, clientID string) (*v1.Granted, error) {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := lc.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: ttl.Milliseconds(), ClientId: clientID}))
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", name, err)
	}
	if !resp.Msg.Acquired {
		return nil, fmt.Errorf("%s is held by another client until %s; wait for it to expire or use a fresh --data-dir",
			name, resp.Msg.GetHolderExpiresAt().AsTime().Format(time.RFC3339))
	}
	return resp.Msg.Granted, nil
}

// acquireWaiting takes name, waiting at most wait for it, with ttl and
// clientID.
func acquireWaiting(ctx context.Context, lc leasegatev1connect.LockServiceClient, name string, ttl time.Duration, clientID string, wait time.Duration) (*v1.Granted, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+rpcTimeout)
	defer cancel()
	stream, err := lc.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: name, TtlMs: ttl.Milliseconds(), ClientId: clientID, WaitTimeoutMs: wait.Milliseconds()}))
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", name, err)
	}
	defer stream.Close()
	for stream.Receive() {
		if g := stream.Msg().GetGranted(); g != nil {
			return g, nil
		}
	}
	return nil, fmt.Errorf("acquire %s: %w", name, stream.Err())
}

// releaseLock releases g.
func releaseLock(ctx context.Context, lc leasegatev1connect.LockServiceClient, g *v1.Granted) error {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if _, err := lc.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: g.LockId, FencingToken: g.FencingToken})); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}
