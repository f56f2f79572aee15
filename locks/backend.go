package locks

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// Backend is one etcd cluster of the shard map as the gateway uses it: a
// client, the one lock engine over it, which serves every tenant in its
// own key space, and its circuit breaker. The Router that dialled it
// closes it.
type Backend struct {
	// Name is the cluster's name in the shard map.
	Name string
	// Client is the etcd client.
	Client *clientv3.Client
	// Engine is the lock engine over Client, acting in the unnamed
	// tenant's key space; Space gives it another tenant's.
	Engine *queue.Engine
	// Breaker guards bounded calls to the cluster.
	Breaker *shard.Breaker
	// Reach follows the client's connection and bounds how long a call
	// waits for one.
	Reach *shard.Reach
}

// TenantPrefix is the etcd prefix of tenant's keys on this cluster,
// <prefix>/t/<tenant>; the empty tenant's is Engine's own prefix. It is
// the prefix of Space(tenant).
func (b *Backend) TenantPrefix(tenant string) string {
	return tenantPrefix(b.Engine.Prefix(), tenant)
}

// EngineOf returns the prefix (TenantPrefix) of the key space of b that
// key belongs to; ok is false for a key outside the cluster's prefix.
func (b *Backend) EngineOf(key string) (prefix string, ok bool) {
	return engineOf(b.Engine.Prefix(), key)
}

// tenantsSeg is the segment under a cluster's prefix that the tenants'
// key spaces nest in: <prefix>/t/<tenant>. None of the unnamed tenant's
// records lives under it (queue's layout: locks, sessions, holds, delays
// …; queue.Engine.Space refuses a space that would overlap them), and a
// tenant's name has no '/' (gateway.ValidateTenant), so no tenant's space
// nests in another's.
const tenantsSeg = "/t/"

// tenantPrefix is the prefix of tenant's key space on a cluster whose
// engine's own space is prefix; the empty tenant's is prefix itself.
func tenantPrefix(prefix, tenant string) string {
	if tenant == "" {
		return prefix
	}
	return prefix + tenantsSeg + tenant
}

// engineOf is tenantPrefix reversed: the prefix of the key space that
// key, a key under prefix, belongs to. The parse is anchored at prefix and
// reads the layout from the root down: a tenant's key is
// <prefix>/t/<tenant>/…, every other key is the unnamed tenant's.
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

// Space returns the cluster's engine acting in tenant's key space (under
// TenantPrefix): the same engine for every tenant, whose calls touch only
// that tenant's keys. The empty tenant's is Engine. The tenant must be
// the caller's, as its authentication names it, never one an id names.
func (b *Backend) Space(tenant string) (*queue.Engine, error) {
	if tenant == "" {
		return b.Engine, nil
	}
	return b.Engine.Space(b.TenantPrefix(tenant))
}

// Call runs fn through the cluster's breaker and, once past it, its
// Reach: an open breaker, or a cluster without a connection for
// shard.ReachConfig.ConnectTimeout, fails the call with an error wrapping
// shard.ErrShardUnavailable that names the cluster. It blocks for as long
// as fn does; bound fn's work with ctx.
func (b *Backend) Call(ctx context.Context, fn func(context.Context) error) error {
	return b.Breaker.Execute(ctx, func(ctx context.Context) error { return b.Reach.Call(ctx, fn) })
}

// healthKey is the key Ping reads, under the engine's prefix; nothing
// writes it.
const healthKey = "/health"

// Ping asks the cluster for a linearizable read of one key: it answers
// only with a leader and a quorum. It is the breaker's probe and the
// gateway's health check, and goes through neither breaker nor Reach
// itself: its callers choose.
func (b *Backend) Ping(ctx context.Context) error {
	_, err := b.Client.Get(ctx, b.Engine.Prefix()+healthKey)
	return err
}

// answers asks the cluster's member for a read it serves without its
// leader: the Reach's check that a silent connection is still alive.
func (b *Backend) answers(ctx context.Context) error {
	_, err := b.Client.Get(ctx, b.Engine.Prefix()+healthKey, clientv3.WithSerializable())
	return err
}

func (b *Backend) close() {
	b.Reach.Close()
	b.Engine.Close()
	b.Client.Close()
}

// target is the backend as a call for tenant's keys sees it.
func (b *Backend) target(tenant string) (Target, error) {
	e, err := b.Space(tenant)
	if err != nil {
		return Target{}, err
	}
	return Target{Shard: b.Name, Engine: e, Backend: b}, nil
}
