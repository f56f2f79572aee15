package queue

import (
	"context"
	"testing"
	"time"
)

// BenchmarkSemaphoreCycle measures what a semaphore's acquire+release
// costs beside a lock's, on one goroutine, in the same run: every
// iteration runs one cycle on a lock (limit 1, a free name) and one on the
// last free slot of a semaphore of limit 3 whose two other slots are held
// throughout, alternately, and times each. ns/lock and ns/semaphore are
// their means, and sem/lock their ratio.
//
//   - session: the cycles' acquires name one session. A lock on a free
//     name goes straight onto the session lease; a semaphore's acquire
//     with others holding rides on the attempt lease first and is moved
//     onto the session at its grant, one transaction more.
//   - perlock: every acquire gets a lease of its own (and its release
//     revokes it in the background, waited for at the end).
//
// Run it with:
//
//	go test ./queue -run '^$' -bench SemaphoreCycle -benchtime=2s -count=3
func BenchmarkSemaphoreCycle(b *testing.B) {
	for _, session := range []bool{true, false} {
		variant := "perlock"
		if session {
			variant = "session"
		}
		b.Run(variant, func(b *testing.B) {
			e, _ := newEngine(b)
			ctx := benchCtx(b)
			base := AcquireRequest{TTL: benchLockTTL, ClientID: "bench"}
			if session {
				s := openBenchSession(b, e)
				base = AcquireRequest{Session: s.Lease, SessionSecret: s.Secret, ClientID: "bench"}
			}
			for i := 0; i < 2; i++ {
				r := base
				r.Name, r.RequestID, r.Limit = "sem", benchRequestID(), 3
				g, err := acquire(ctx, e, r)
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _, _ = e.Release(context.Background(), g.Handle, g.Token()) }()
			}
			compactForBench(b)
			var lock, sem time.Duration
			n := 0
			for b.Loop() {
				// Alternate which goes first: a per-lock release's revoke
				// runs in the background, into the next cycle.
				order := []int{1, 3}
				if n%2 == 1 {
					order = []int{3, 1}
				}
				for _, limit := range order {
					r := base
					r.Name, r.RequestID, r.Limit = "lock", benchRequestID(), limit
					if limit > 1 {
						r.Name = "sem"
					}
					t0 := time.Now()
					if err := engineCycle(ctx, e, r); err != nil {
						b.Fatal(err)
					}
					if d := time.Since(t0); limit > 1 {
						sem += d
					} else {
						lock += d
					}
				}
				n++
			}
			e.tasks.Wait()
			b.ReportMetric(float64(lock.Nanoseconds())/float64(n), "ns/lock")
			b.ReportMetric(float64(sem.Nanoseconds())/float64(n), "ns/semaphore")
			b.ReportMetric(float64(sem)/float64(lock), "sem/lock")
		})
	}
}
