package queue

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// footprintWaiters is the queue BenchmarkWaiterFootprint measures.
const footprintWaiters = 500

// BenchmarkWaiterFootprint measures what one waiting waiter costs the
// engine's process: footprintWaiters waiters queue on one name behind a
// holder, and the goroutines and live heap they add are divided by their
// number. The package's etcd runs in the same process, so both are split
// by stack: what etcd's server (and gRPC's server side) holds is reported
// apart (server-…/waiter), everything else — the engine, the etcd client,
// gRPC's client side — is the engine's (goroutines/waiter, heap-B/waiter).
// One measurement per iteration; run it with -benchtime=1x:
//
//	go test ./queue -run '^$' -bench WaiterFootprint -benchtime=1x
func BenchmarkWaiterFootprint(b *testing.B) {
	e, _ := newEngine(b)
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1 // every allocation from here on is in the profile
	defer func() { runtime.MemProfileRate = old }()
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("footprint-%d", i)
		ctx, cancel := context.WithCancel(benchCtx(b))
		hr := req(name)
		hr.TTL = 5 * time.Minute // outlives a slow, profiled run
		holder := mustAcquire(b, e, hr)
		g0, gs0 := goroutinesBySide()
		h0, hs0 := heapBySide()
		wait := queueWaiters(b, ctx, e, footprintWaiters, func() AcquireRequest { return req(name) })
		settleGoroutines()
		g1, gs1 := goroutinesBySide()
		h1, hs1 := heapBySide()
		b.ReportMetric(float64(g1-g0)/footprintWaiters, "goroutines/waiter")
		b.ReportMetric(float64(h1-h0)/footprintWaiters, "heap-B/waiter")
		b.ReportMetric(float64(gs1-gs0)/footprintWaiters, "server-goroutines/waiter")
		b.ReportMetric(float64(hs1-hs0)/footprintWaiters, "server-heap-B/waiter")
		cancel()
		_ = wait() // cancelled
		mustRelease(b, e, holder)
	}
}

// settleGoroutines returns once the number of goroutines has not changed
// for 200 ms (at most 10 s): the waiters' watches and timers are set up
// asynchronously, and nothing reports when the last one is.
func settleGoroutines() {
	last, since := runtime.NumGoroutine(), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if n := runtime.NumGoroutine(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= 200*time.Millisecond {
			return
		}
	}
}

// serverSide reports whether a stack belongs to etcd's server or gRPC's
// server side.
func serverSide(stack string) bool {
	return strings.Contains(stack, "go.etcd.io/etcd/server/") || strings.Contains(stack, "http2Server") ||
		strings.Contains(stack, "grpc.(*Server)") || strings.Contains(stack, "go.etcd.io/raft/")
}

// goroutinesBySide counts the process's goroutines outside and inside
// etcd's server.
func goroutinesBySide() (engine, server int) {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if serverSide(string(g)) {
			server++
		} else {
			engine++
		}
	}
	return engine, server
}

// heapBySide sums the bytes in use, as of a fresh collection, of the
// allocations the memory profile recorded, outside and inside etcd's
// server.
func heapBySide() (engine, server int64) {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	for _, r := range recs {
		var sb strings.Builder
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			sb.WriteString(f.Function)
			sb.WriteByte('\n')
			if !more {
				break
			}
		}
		if serverSide(sb.String()) {
			server += r.InUseBytes()
		} else {
			engine += r.InUseBytes()
		}
	}
	return engine, server
}

// drainWaiters is the queue BenchmarkDrain drains.
const drainWaiters = 300

// BenchmarkDrain drains a queue of drainWaiters waiters on one name, each
// releasing as soon as it is granted, beside a chain of as many
// concurrency.Mutex waiters on the same etcd, in the same iteration. The
// timed span of each is from the holder's release to the last waiter's
// release; queueing the waiters is not timed. ns/drain is the engine's,
// mutex-ns/drain the Mutex's, and x-mutex their ratio (below 1: the engine
// drains faster).
//
//	go test ./queue -run '^$' -bench Drain -benchtime=3x
func BenchmarkDrain(b *testing.B) {
	for _, mode := range []string{"engine-perlock", "engine-session"} {
		b.Run(mode, func(b *testing.B) {
			e, cli := newEngine(b)
			ctx := benchCtx(b)
			var sess Session
			if mode == "engine-session" {
				var err error
				if sess, err = e.OpenSession(ctx, "drain", benchSessionTTL); err != nil {
					b.Fatal(err)
				}
			}
			sessions := make([]*concurrency.Session, drainWaiters+1)
			for i := range sessions {
				s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(benchSessionTTL/time.Second)))
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				sessions[i] = s
			}
			var engine, mutex time.Duration
			for i := 0; b.Loop(); i++ {
				compactForBench(b)
				engine += drainEngine(b, e, sess, fmt.Sprintf("drain-%d", i))
				mutex += drainMutex(b, cli, sessions, fmt.Sprintf("%s/drain-%d", benchPrefix(), i))
			}
			b.ReportMetric(float64(engine.Nanoseconds())/float64(b.N), "ns/drain")
			b.ReportMetric(float64(mutex.Nanoseconds())/float64(b.N), "mutex-ns/drain")
			b.ReportMetric(float64(engine)/float64(mutex), "x-mutex")
		})
	}
}

// drainEngine queues drainWaiters behind a holder on name and times their
// drain.
func drainEngine(b *testing.B, e *Engine, sess Session, name string) time.Duration {
	ctx := benchCtx(b)
	r := AcquireRequest{Name: name, TTL: benchLockTTL, ClientID: "c", Session: sess.Lease, SessionSecret: sess.Secret}
	r.RequestID = benchRequestID()
	holder, err := acquire(ctx, e, r)
	if err != nil {
		b.Fatal(err)
	}
	wait := queueWaiters(b, ctx, e, drainWaiters, func() AcquireRequest {
		r.RequestID = benchRequestID()
		return r
	})
	t0 := time.Now()
	if _, err := e.Release(ctx, holder.Handle, holder.Token()); err != nil {
		b.Fatal(err)
	}
	err = wait()
	d := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// queueWaiters enqueues n waiters that next makes, each waiting on a
// goroutine of its own and releasing as soon as it is granted, and
// returns once every one has reported its position. wait waits for them
// all and returns the first error.
func queueWaiters(b *testing.B, ctx context.Context, e *Engine, n int, next func() AcquireRequest) (wait func() error) {
	var wg sync.WaitGroup
	queued := make(chan struct{}, n)
	errs := make(chan error, n)
	for w := 0; w < n; w++ {
		r := next()
		once := sync.OnceFunc(func() { queued <- struct{}{} })
		r.OnQueued = func(int64) { once() }
		wt, err := e.Enqueue(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := wt.Wait(ctx)
			if err == nil {
				_, err = e.Release(context.Background(), g.Handle, g.Token())
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	for w := 0; w < n; w++ {
		<-queued
	}
	return func() error {
		wg.Wait()
		close(errs)
		return <-errs
	}
}

// drainMutex queues len(sessions)-1 Mutex waiters behind a holder on pfx
// and times their drain.
func drainMutex(b *testing.B, cli *clientv3.Client, sessions []*concurrency.Session, pfx string) time.Duration {
	ctx := benchCtx(b)
	holder := concurrency.NewMutex(sessions[0], pfx)
	if err := holder.Lock(ctx); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(sessions))
	for _, s := range sessions[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := concurrency.NewMutex(s, pfx)
			err := m.Lock(ctx)
			if err == nil {
				err = m.Unlock(ctx)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	// Mutex reports no event for a queued waiter: wait for every key.
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := cli.Get(ctx, pfx+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		if resp.Count == int64(len(sessions)) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d Mutex keys after 30s", resp.Count, len(sessions))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t0 := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	d := time.Since(t0)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return d
}
