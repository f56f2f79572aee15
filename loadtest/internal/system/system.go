// Package system puts every lock service the load test compares behind one
// small interface: the leasegate gateway through its Go SDK, the engine's
// own etcd transactions issued directly, etcd's concurrency.Mutex, and
// redsync on redis-server.
package system

import (
	"context"
	"errors"
)

// System is one lock service under test. Close releases what NewClient
// did not already give back.
type System interface {
	// Name identifies the system in results ("gateway-session", "mutex" …).
	Name() string
	// Describe says in one line what is measured, for the report.
	Describe() string
	// NewClient returns one worker's own client: its session, lease or
	// connection share, as a real user of the system would hold it.
	NewClient(ctx context.Context) (Client, error)
	// Close tears the system's shared resources down.
	Close() error
}

// Client is one worker's handle on a System. It is used by one goroutine.
type Client interface {
	// Acquire takes the lock name, waiting in line if the system queues.
	// onEnqueued, when not nil, is called once as soon as the client knows
	// its place in the line is taken (never for a grant without a wait on
	// systems that report places only while waiting, and at once on
	// systems without a line).
	Acquire(ctx context.Context, name string, onEnqueued func()) (Held, error)
	// Close ends the client's session or lease.
	Close(ctx context.Context) error
}

// Held is a granted lock.
type Held interface {
	// Release frees the lock.
	Release(ctx context.Context) error
	// Order is the grant's place in its name's queue (the etcd create
	// revision of the holder's key), or 0 on systems without a queue.
	Order() int64
}

// ErrBusy is returned by systems that cannot wait (the direct-txn floor)
// when the name is held.
var ErrBusy = errors.New("system: the lock is held and this system does not wait")

// once wraps f so it runs at most once; nil stays nil.
func once(f func()) func() {
	if f == nil {
		return func() {}
	}
	done := false
	return func() {
		if !done {
			done = true
			f()
		}
	}
}
