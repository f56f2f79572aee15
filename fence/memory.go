package fence

import (
	"context"
	"sync"
)

// Memory is a Store that keeps the highest token per resource in memory. It
// suits tests and resources that live in a single process; its state is lost
// when the process exits, so a restarted resource accepts any token again.
// Entries are never removed: memory grows with the number of distinct keys.
//
// The zero value is not ready for use; call NewMemory. A Memory is safe for
// concurrent use.
type Memory struct {
	mu   sync.Mutex
	keys map[string]*memKey
}

// memKey serialises the writes of one resource. sem is a one-slot semaphore
// rather than a sync.Mutex so that waiting for it honours a context.
type memKey struct {
	sem     chan struct{}
	highest int64
	seen    bool
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{keys: make(map[string]*memKey)}
}

// Write runs fn only if token is not lower than the highest token accepted
// for resource, and records token as the highest if fn returns nil. The
// check, fn and the record form one critical section per resource: writes of
// the same resource never overlap, so a lower token that arrives while a
// higher one is being written waits and is then refused. If fn fails, its
// error is returned and nothing is recorded. A nil fn only records the token.
//
// Write blocks while another write of the same resource runs, until ctx is
// done; fn should not call back into the same Memory for the same resource.
func (m *Memory) Write(ctx context.Context, resource string, token int64, fn func() error) error {
	if err := validate(resource, token); err != nil {
		return err
	}
	k, err := m.lock(ctx, resource)
	if err != nil {
		return err
	}
	defer func() { <-k.sem }()
	if k.seen && token < k.highest {
		return stale(resource, token, k.highest)
	}
	if fn != nil {
		if err := fn(); err != nil {
			return err
		}
	}
	k.highest, k.seen = token, true
	return nil
}

// Accept records token as the highest token for resource unless it is lower
// than the current highest. It is Write with no write of its own.
func (m *Memory) Accept(ctx context.Context, resource string, token int64) error {
	return m.Write(ctx, resource, token, nil)
}

// Highest returns the highest token accepted for resource, and false if none
// was. It waits for a write of the same resource in progress to finish, until
// ctx is done.
func (m *Memory) Highest(ctx context.Context, resource string) (int64, bool, error) {
	if resource == "" {
		return 0, false, ErrEmptyResource
	}
	k, err := m.lock(ctx, resource)
	if err != nil {
		return 0, false, err
	}
	defer func() { <-k.sem }()
	return k.highest, k.seen, nil
}

// lock takes resource's semaphore, creating the entry on first use.
func (m *Memory) lock(ctx context.Context, resource string) (*memKey, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	k, ok := m.keys[resource]
	if !ok {
		k = &memKey{sem: make(chan struct{}, 1)}
		m.keys[resource] = k
	}
	m.mu.Unlock()
	select {
	case k.sem <- struct{}{}:
		return k, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
