package client

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// renewGate bounds the scheduled renewals one Client has in flight, and
// when more are due than it admits, admits the most urgent first: the one
// whose lease reaches its conservative deadline soonest (ties in arrival
// order).
//
// Without it every held lock sends its renewal the moment it is due. A
// process holding thousands of per-lock leases then has thousands of
// renewals in flight as soon as the gateway slows down (a CPU-starved
// machine is enough): each HTTP/2 connection carries at most the server's
// SETTINGS_MAX_CONCURRENT_STREAMS (the gateway's MaxStreamsPerConn), so the
// transport dials a new connection for every request beyond that, and
// thousands of dials and half-opened connections swamp the gateway that was
// already short of CPU. Every renewal then misses its attempt timeout, the
// work done for it is thrown away, and the retries start the same way: no
// lease is confirmed any more and every lock is lost together. Queued
// here, a due renewal costs a parked goroutine; the gateway sees no more
// than max at a time, and the leases closest to their deadline go first,
// so a gateway that can confirm each lease once per TTL keeps every lock.
type renewGate struct {
	mu      sync.Mutex
	max     int
	busy    int
	seq     uint64
	waiting renewQueue
}

func newRenewGate(max int) *renewGate { return &renewGate{max: max} }

// renewTurn is one renewal waiting for its turn.
type renewTurn struct {
	deadline time.Time
	seq      uint64
	index    int           // in the heap; -1 once admitted or withdrawn
	ready    chan struct{} // closed when admitted
}

// enter waits until the renewal of a lease whose deadline is deadline may
// be sent, or ctx ends. On success the caller must call the returned
// release once its request is answered or abandoned.
func (g *renewGate) enter(ctx context.Context, deadline time.Time) (release func(), err error) {
	g.mu.Lock()
	if g.busy < g.max && len(g.waiting) == 0 {
		g.busy++
		g.mu.Unlock()
		return g.release, nil
	}
	g.seq++
	t := &renewTurn{deadline: deadline, seq: g.seq, ready: make(chan struct{})}
	heap.Push(&g.waiting, t)
	g.mu.Unlock()
	select {
	case <-t.ready:
		return g.release, nil
	case <-ctx.Done():
		g.mu.Lock()
		admitted := t.index < 0
		if !admitted {
			heap.Remove(&g.waiting, t.index)
		}
		g.mu.Unlock()
		if admitted {
			// Admitted as ctx ended: pass the turn on.
			g.release()
		}
		return nil, ctx.Err()
	}
}

// release ends one admitted renewal's turn and admits the most urgent
// waiting one, if any.
func (g *renewGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) > 0 {
		t := heap.Pop(&g.waiting).(*renewTurn)
		close(t.ready) // its turn is the one just ended: busy is unchanged
		return
	}
	g.busy--
}

// waitingCount is how many renewals wait for their turn.
func (g *renewGate) waitingCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

// renewQueue is a min-heap of waiting renewals by deadline, then arrival.
type renewQueue []*renewTurn

func (q renewQueue) Len() int { return len(q) }
func (q renewQueue) Less(i, j int) bool {
	if !q[i].deadline.Equal(q[j].deadline) {
		return q[i].deadline.Before(q[j].deadline)
	}
	return q[i].seq < q[j].seq
}
func (q renewQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *renewQueue) Push(x any) {
	t := x.(*renewTurn)
	t.index = len(*q)
	*q = append(*q, t)
}
func (q *renewQueue) Pop() any {
	old := *q
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*q = old[:len(old)-1]
	return t
}
