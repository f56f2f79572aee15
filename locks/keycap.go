package locks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrKeyCap reports a tenant at its key cap on a shard: a call that would
// store something new (a waiter's key, a session's lease) while the
// tenant's keys there number the cap. It frees as the tenant's locks and
// waits end, not with time.
var ErrKeyCap = errors.New("tenant key cap")

type keyCapError struct {
	tenant, shard string
	max           int
}

func (e *keyCapError) Error() string {
	return fmt.Sprintf("tenant %q holds or waits for %d locks on shard %q, the limit", e.tenant, e.max, e.shard)
}

func (e *keyCapError) Is(target error) bool { return target == ErrKeyCap }

// tenantShard keys Router.keys: one count per tenant and shard.
type tenantShard struct{ tenant, shard string }

// keyCount is a tenant's key count on one shard, as last read.
type keyCount struct {
	mu sync.Mutex
	at time.Time
	n  int64
}

// checkKeys refuses tenant's call on t with ErrKeyCap when the tenant
// holds max keys there (0: no cap). The count is one bounded call
// through the shard's breaker, made at most once a second per tenant and
// shard; between counts every admitted call counts as one key more.
func (r *Router) checkKeys(ctx context.Context, tenant string, t Target, max int) error {
	if max <= 0 {
		return nil
	}
	v, _ := r.keys.LoadOrStore(tenantShard{tenant, t.Shard}, &keyCount{})
	kc := v.(*keyCount)
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if r.cfg.Clock.Now().Sub(kc.at) > time.Second {
		cctx, cancel := r.Bound(ctx) // an Acquire's own context may wait for hours
		n, err := do(cctx, t, func(ctx context.Context) (int64, error) { return t.Engine.CountKeys(ctx) })
		cancel()
		if err != nil {
			return err
		}
		kc.n, kc.at = n, r.cfg.Clock.Now()
	}
	if kc.n >= int64(max) {
		return &keyCapError{tenant: tenant, shard: t.Shard, max: max}
	}
	kc.n++ // count this call until the next count
	return nil
}
