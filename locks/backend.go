package locks

import (
	"context"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// Backend is one etcd cluster of the shard map as the gateway uses it: a
// client, the lock engines over it (the unnamed tenant's and one per tenant
// served) and its circuit breaker. The Router that dialled it closes it.
type Backend struct {
	// Name is the cluster's name in the shard map.
	Name string
	// Client is the etcd client.
	Client *clientv3.Client
	// Engine is the lock engine over Client.
	Engine *queue.Engine
	// Breaker guards bounded calls to the cluster.
	Breaker *shard.Breaker
	// Reach follows the client's connection and bounds how long a call
	// waits for one.
	Reach *shard.Reach

	qcfg       queue.Config
	maxTenants int
	mu         sync.Mutex
	tenants    map[string]*queue.Engine
}

// idleTenant is how long a tenant's engine must have been unused before it
// may be closed to make room for another.
var idleTenant = time.Minute

// TenantPrefix is the etcd prefix of tenant's keys on this cluster,
// <prefix>/t/<tenant>; the empty tenant's is Engine's own prefix. It is
// the prefix of TenantEngine(tenant).
func (b *Backend) TenantPrefix(tenant string) string { return tenantPrefix(b.qcfg.Prefix, tenant) }

// EngineOf returns the prefix (TenantPrefix) of the engine of b that key
// belongs to; ok is false for a key outside the cluster's prefix.
func (b *Backend) EngineOf(key string) (prefix string, ok bool) {
	return engineOf(b.qcfg.Prefix, key)
}

// tenantsSeg is the segment under a cluster's prefix that the tenants'
// engines nest in: <prefix>/t/<tenant>. None of an engine's own records
// lives under it (queue's layout: locks, sessions, holds, delays …), and
// a tenant's name has no '/' (gateway.ValidateTenant).
const tenantsSeg = "/t/"

// tenantPrefix is the prefix of tenant's engine on a cluster whose
// engines live under prefix; the empty tenant's is prefix itself.
func tenantPrefix(prefix, tenant string) string {
	if tenant == "" {
		return prefix
	}
	return prefix + tenantsSeg + tenant
}

// engineOf is tenantPrefix reversed: the prefix of the engine that key,
// a key under prefix, belongs to. The parse is anchored at prefix and
// reads the layout from the root down: a tenant's key is
// <prefix>/t/<tenant>/…, every other key is the cluster's own engine's.
func engineOf(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"/")
	if !ok {
		return "", false
	}
	if t, ok := strings.CutPrefix(rest, tenantsSeg[1:]); ok {
		tenant, _, ok := strings.Cut(t, "/")
		if !ok || tenant == "" {
			return "", false
		}
		return tenantPrefix(prefix, tenant), true
	}
	return prefix, true
}

// TenantEngine returns the engine for tenant's locks on this cluster
// (under TenantPrefix). The empty tenant is Engine.
//
// Engines are cached, at most RouterConfig.MaxTenantEngines of them: past
// the bound, engines idle for a minute are closed to make room (an engine
// that has a call, a wait or a background task never is), so the tenant
// names an issuer signs cannot grow a gateway's memory without end. When
// every cached engine is busy the bound is exceeded rather than a call
// refused.
func (b *Backend) TenantEngine(tenant string) (*queue.Engine, error) {
	if tenant == "" {
		return b.Engine, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.tenants[tenant]; ok {
		e.Touch()
		return e, nil
	}
	if b.maxTenants > 0 && len(b.tenants) >= b.maxTenants {
		for t, e := range b.tenants {
			if e.Idle(idleTenant) {
				delete(b.tenants, t)
				e.Close()
				if len(b.tenants) < b.maxTenants {
					break
				}
			}
		}
	}
	qc := b.qcfg
	qc.Prefix = b.TenantPrefix(tenant)
	e, err := queue.New(b.Client, qc)
	if err != nil {
		return nil, err
	}
	if b.tenants == nil {
		b.tenants = map[string]*queue.Engine{}
	}
	b.tenants[tenant] = e
	return e, nil
}

// tenantEngines counts the cached tenant engines.
func (b *Backend) tenantEngines() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.tenants)
}

// Call runs fn through the cluster's breaker and, once past it, its
// Reach: an open breaker, or a cluster without a connection for
// shard.ReachConfig.ConnectTimeout, fails the call with an error wrapping
// shard.ErrShardUnavailable that names the cluster. It blocks for as long
// as fn does; bound fn's work with ctx.
func (b *Backend) Call(ctx context.Context, fn func(context.Context) error) error {
	return b.Breaker.Execute(ctx, func(ctx context.Context) error { return b.Reach.Call(ctx, fn) })
}

// healthKey is the key Ping reads, under the engines' prefix; nothing
// writes it.
const healthKey = "/health"

// Ping asks the cluster for a linearizable read of one key: it answers
// only with a leader and a quorum. It is the breaker's probe and the
// gateway's health check, and goes through neither breaker nor Reach
// itself: its callers choose.
func (b *Backend) Ping(ctx context.Context) error {
	_, err := b.Client.Get(ctx, b.Engine.Config().Prefix+healthKey)
	return err
}

// answers asks the cluster's member for a read it serves without its
// leader: the Reach's check that a silent connection is still alive.
func (b *Backend) answers(ctx context.Context) error {
	_, err := b.Client.Get(ctx, b.Engine.Config().Prefix+healthKey, clientv3.WithSerializable())
	return err
}

func (b *Backend) close() {
	b.Reach.Close()
	b.mu.Lock()
	for _, e := range b.tenants {
		e.Close()
	}
	b.tenants = nil
	b.mu.Unlock()
	b.Engine.Close()
	b.Client.Close()
}

// target is the backend as a call for tenant's keys sees it.
func (b *Backend) target(tenant string) (Target, error) {
	e, err := b.TenantEngine(tenant)
	if err != nil {
		return Target{}, err
	}
	return Target{Shard: b.Name, Engine: e, Backend: b}, nil
}

// countKeys counts the lock keys of every engine of the backend.
func (b *Backend) countKeys(ctx context.Context) (int64, error) {
	b.mu.Lock()
	engines := []*queue.Engine{b.Engine}
	for _, e := range b.tenants {
		engines = append(engines, e)
	}
	b.mu.Unlock()
	var total int64
	for _, e := range engines {
		n, err := e.CountLocks(ctx)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
