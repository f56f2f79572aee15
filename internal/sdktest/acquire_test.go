package sdktest_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/client"
)

func TestAcquireTryAcquireRelease(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	a := newClient(t, []string{g.URL}, client.WithClientID("worker-a"))
	b := newClient(t, []string{g.URL}, client.WithClientID("worker-b"))
	ctx := ctxT(t)

	lock, err := a.Acquire(ctx, "orders/42", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if lock.Name() != "orders/42" || lock.Token() <= 0 || lock.ID() == "" || lock.Shard() != "main" || lock.TTL() != 5*time.Second {
		t.Fatalf("lock = name %q token %d id %q shard %q ttl %s; want orders/42, positive, non-empty, main, 5s",
			lock.Name(), lock.Token(), lock.ID(), lock.Shard(), lock.TTL())
	}
	if lock.Err() != nil {
		t.Fatalf("Err() of a held lock = %v; want nil", lock.Err())
	}
	if rid := lock.RequestID(); len(rid) != 32 || strings.Trim(rid, "0123456789abcdef") != "" {
		t.Fatalf("RequestID() = %q; want the drawn 128-bit id in hex", rid)
	}
	d, err := b.Describe(ctx, "orders/42")
	if err != nil || !d.Held || d.Token != lock.Token() || d.HolderClientID != "worker-a" || d.Shard != "main" {
		t.Fatalf("Describe = %+v, %v; want held by worker-a with token %d on main", d, err, lock.Token())
	}

	_, err = b.TryAcquire(ctx, "orders/42")
	var held *client.HeldError
	if !errors.Is(err, client.ErrNotAcquired) || !errors.As(err, &held) || held.HolderExpires.IsZero() {
		t.Fatalf("TryAcquire of a held lock = %v; want a *HeldError with the holder's expiry", err)
	}

	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-lock.Done()
	if !errors.Is(lock.Err(), client.ErrReleased) {
		t.Fatalf("Err() after Release = %v; want ErrReleased", lock.Err())
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("second Release = %v; want nil", err)
	}

	next, err := b.TryAcquire(ctx, "orders/42", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= lock.Token() {
		t.Fatalf("next token %d not above %d", next.Token(), lock.Token())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireWaitsInOrderAndReportsPositions(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	holder, err := c.Acquire(ctx, "fifo", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	type result struct {
		i    int
		lock *client.Lock
		err  error
	}
	granted := make(chan result, n)
	var firstPos [n]chan int64
	for i := 0; i < n; i++ {
		firstPos[i] = make(chan int64, 16)
		go func() {
			l, err := c.Acquire(ctx, "fifo", client.WithTTL(10*time.Second), client.WithOnQueued(func(p int64) { firstPos[i] <- p }))
			granted <- result{i, l, err}
		}()
		if p := await(t, firstPos[i], "queued"); p != int64(i+1) {
			t.Fatalf("waiter %d first position = %d; want %d", i, p, i+1)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	prev := holder.Token()
	for want := 0; want < n; want++ {
		r := await(t, granted, "grant")
		if r.err != nil || r.i != want {
			t.Fatalf("grant %d went to waiter %d (err %v); want waiter %d", want, r.i, r.err, want)
		}
		if r.lock.Token() <= prev {
			t.Fatalf("waiter %d token %d not above %d", r.i, r.lock.Token(), prev)
		}
		prev = r.lock.Token()
		if err := r.lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	holder, err := c.TryAcquire(ctx, "busy", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	_, err = c.Acquire(ctx, "busy", client.WithWaitTimeout(300*time.Millisecond))
	var ce *connect.Error
	if !errors.Is(err, client.ErrWaitTimeout) || !errors.As(err, &ce) || ce.Code() != connect.CodeDeadlineExceeded || client.Reason(err) != client.ReasonWaitTimeout {
		t.Fatalf("Acquire past its wait timeout = %v; want ErrWaitTimeout wrapping deadline_exceeded/WAIT_TIMEOUT", err)
	}
	// The gateway leaves the queue in the background as it answers: await
	// the waiter key's deletion in etcd, then check.
	cli := shared.ClientFor(t)
	keys := g.Prefix + "/locks/busy/"
	for {
		resp, err := cli.Get(ctx, keys, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count <= 1 {
			break
		}
		<-cli.Watch(ctx, keys, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	}
	d, err := c.Describe(ctx, "busy")
	if err != nil || d.Waiters != 0 {
		t.Fatalf("Describe after the timeout = %+v, %v; want no waiters", d, err)
	}
}

func TestProtocols(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	for _, p := range []client.Protocol{client.ProtocolConnect, client.ProtocolGRPC, client.ProtocolGRPCWeb} {
		t.Run(p.String(), func(t *testing.T) {
			c := newClient(t, []string{g.URL}, client.WithProtocol(p))
			ctx := ctxT(t)
			l, err := c.Acquire(ctx, "proto-"+p.String(), client.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.TryAcquire(ctx, "proto-"+p.String()); !errors.Is(err, client.ErrNotAcquired) {
				t.Fatalf("TryAcquire over %s = %v; want ErrNotAcquired", p, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		endpoints []string
		opts      []client.Option
		want      string
	}{
		{nil, nil, "no endpoints"},
		{[]string{"127.0.0.1:7070"}, nil, `endpoint "127.0.0.1:7070"`},
		{[]string{"http://x"}, []client.Option{client.WithRenewFraction(0.9)}, "renew fraction 0.9"},
		{[]string{"http://x"}, []client.Option{client.WithRetryBackoff(time.Second, time.Millisecond)}, "retry backoff"},
		{[]string{"http://x"}, []client.Option{client.WithClientID(strings.Repeat("x", 200))}, "client id is 200 bytes"},
	} {
		_, err := client.New(tc.endpoints, tc.opts...)
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q) = %v; want ErrInvalidArgument mentioning %q", tc.endpoints, err, tc.want)
		}
	}

	g := startGateway(t, "")
	c := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	if _, err := c.Acquire(ctx, ""); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("Acquire(\"\") = %v; want ErrInvalidArgument", err)
	}
	if _, err := c.Acquire(ctx, "x", client.WithTTL(-time.Second)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("Acquire with a negative TTL = %v; want ErrInvalidArgument", err)
	}
	// Refused by the gateway: the answer is wrapped, not retried.
	_, err := c.Acquire(ctx, "bad\x01name")
	var ce *connect.Error
	if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Errorf("Acquire of a name with a control character = %v; want ErrInvalidArgument wrapping invalid_argument", err)
	}
}

// deadEndpoint returns the URL of a port that refuses connections.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestFailsOverFromAnUnreachableEndpoint(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c := newClient(t, []string{deadEndpoint(t), g.URL})
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "failover", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("Acquire with the first endpoint down = %v; want a grant from the second", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	dead := newClient(t, []string{deadEndpoint(t)}, client.WithRetryBackoff(time.Millisecond, time.Millisecond))
	_, err = dead.TryAcquire(ctx, "failover")
	if !errors.Is(err, client.ErrUnavailable) || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("TryAcquire with no gateway up = %v; want ErrUnavailable wrapping unavailable", err)
	}
}
