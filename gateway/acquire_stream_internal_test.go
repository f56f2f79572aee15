package gateway

import (
	"errors"
	"sync"
	"testing"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// recordedStream is an acquireStream whose writes are recorded in order;
// a write of the grant waits for grantGo when it is set.
type recordedStream struct {
	*acquireStream
	mu      sync.Mutex
	writes  []string
	grantIn chan struct{} // closed as the grant's write begins
	grantGo chan struct{}
}

func newRecordedStream() *recordedStream {
	r := &recordedStream{grantIn: make(chan struct{})}
	r.acquireStream = &acquireStream{send: func(fn func() error) error { return fn() }, sink: acquireSink{
		queued: func(q *v1.Queued) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.writes = append(r.writes, "queued")
			return nil
		},
		granted: func(*v1.Granted) error {
			close(r.grantIn)
			if r.grantGo != nil {
				<-r.grantGo
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.writes = append(r.writes, "granted")
			return nil
		},
	}}
	return r
}

func (r *recordedStream) written() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...)
}

// TestAcquireStreamEndsAtItsGrant: nothing is written on an Acquire stream
// after its grant or once its handler has ended it — not a position, not a
// heartbeat — and a heartbeat that falls due while the grant is being
// written waits for it and then writes nothing: the grant is the stream's
// last message whatever the engine's goroutines do.
func TestAcquireStreamEndsAtItsGrant(t *testing.T) {
	t.Run("after the grant", func(t *testing.T) {
		r := newRecordedStream()
		if err := r.queued(1); err != nil {
			t.Fatal(err)
		}
		if err := r.granted(&v1.Granted{}); err != nil {
			t.Fatal(err)
		}
		if err := r.heartbeat(); !errors.Is(err, errStreamEnded) {
			t.Errorf("heartbeat after the grant = %v; want errStreamEnded", err)
		}
		if err := r.queued(1); !errors.Is(err, errStreamEnded) {
			t.Errorf("position after the grant = %v; want errStreamEnded", err)
		}
		if w := r.written(); len(w) != 2 || w[1] != "granted" {
			t.Fatalf("writes %v; want a position, then the grant last", w)
		}
	})
	t.Run("a heartbeat during the grant", func(t *testing.T) {
		r := newRecordedStream()
		r.grantGo = make(chan struct{})
		if err := r.queued(1); err != nil {
			t.Fatal(err)
		}
		granted := make(chan error, 1)
		go func() { granted <- r.granted(&v1.Granted{}) }()
		<-r.grantIn
		beat := make(chan error, 1)
		go func() { beat <- r.heartbeat() }()
		close(r.grantGo)
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
		if err := <-beat; !errors.Is(err, errStreamEnded) {
			t.Errorf("heartbeat that fell due during the grant = %v; want errStreamEnded", err)
		}
		if w := r.written(); len(w) != 2 || w[1] != "granted" {
			t.Fatalf("writes %v; want a position, then the grant last", w)
		}
	})
	t.Run("after the handler", func(t *testing.T) {
		r := newRecordedStream()
		if err := r.queued(3); err != nil {
			t.Fatal(err)
		}
		r.end()
		if err := r.heartbeat(); !errors.Is(err, errStreamEnded) {
			t.Errorf("heartbeat after the handler's end = %v; want errStreamEnded", err)
		}
		if w := r.written(); len(w) != 1 {
			t.Fatalf("writes %v; want the one position before the end", w)
		}
	})
	t.Run("a failed position", func(t *testing.T) {
		r := newRecordedStream()
		gone := errors.New("client gone")
		r.send = func(func() error) error { return gone }
		if err := r.queued(1); !errors.Is(err, gone) {
			t.Fatalf("queued = %v; want %v", err, gone)
		}
		if err := r.granted(&v1.Granted{}); !errors.Is(err, gone) {
			t.Errorf("grant after a failed position = %v; want %v (given up, not written)", err, gone)
		}
		if w := r.written(); len(w) != 0 {
			t.Fatalf("writes %v; want none", w)
		}
	})
}
