package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasegate/leasegate/queue"
)

// Backend is one etcd cluster as the gateway uses it: a client, the lock
// engine over it and its circuit breaker.
type Backend struct {
	// Name is the cluster's name in the shard map.
	Name string
	// Client is the etcd client.
	Client *clientv3.Client
	// Engine is the lock engine over Client.
	Engine *queue.Engine
	// Breaker guards bounded calls to the cluster.
	Breaker *Breaker

	qcfg       queue.Config
	maxTenants int
	mu         sync.Mutex
	tenants    map[string]*queue.Engine
}

// idleTenant is how long a tenant's engine must have been unused before it
// may be closed to make room for another.
var idleTenant = time.Minute

// TenantEngine returns the engine for tenant's locks on this cluster; each
// tenant's keys live under <prefix>/t/<tenant>. The empty tenant is Engine.
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
	qc.Prefix = qc.Prefix + "/t/" + tenant
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

func (b *Backend) close() {
	b.mu.Lock()
	for _, e := range b.tenants {
		e.Close()
	}
	b.tenants = nil
	b.mu.Unlock()
	b.Engine.Close()
	b.Client.Close()
}

// Route is where a name's calls go under the map in force.
type Route struct {
	// Backend owns the name under the map in force.
	Backend *Backend
	// Epoch is the map's epoch; new waiters are enqueued under it.
	Epoch uint16
	// Guard fences enqueues: it holds only while the cluster obeys Epoch.
	Guard clientv3.Cmp
	// Previous is the cluster the name is moving away from while that
	// cluster drains; nil when the name did not move.
	Previous *Backend
}

// RouterConfig configures a Router.
type RouterConfig struct {
	// Prefix is the etcd key prefix shared with the engines. Default
	// DefaultPrefix.
	Prefix string
	// Queue configures each cluster's engine; its Prefix is set to Prefix.
	Queue queue.Config
	// Breaker configures each cluster's breaker.
	Breaker BreakerConfig
	// Endpoints, by cluster name, override the endpoints stored in the map
	// with what this process knows (embedded clusters, local addresses).
	Endpoints map[string][]string
	// Dial connects to a cluster. Default: clientv3.New with keepalives.
	Dial func(name string, endpoints []string) (*clientv3.Client, error)
	// Watch follows the stored map; without it the router only reloads
	// when asked. Default true through DefaultRouterConfig.
	Watch bool
	// Log receives routing events; nil discards them.
	Log *slog.Logger
	// MaxTenantEngines bounds the tenant engines each cluster's backend
	// caches (see Backend.TenantEngine). Default 10,000; 0 is unbounded.
	MaxTenantEngines int
}

// DefaultRouterConfig returns the documented defaults.
func DefaultRouterConfig() RouterConfig {
	return RouterConfig{
		Prefix:           DefaultPrefix,
		Queue:            queue.DefaultConfig(),
		Breaker:          DefaultBreakerConfig(),
		Watch:            true,
		MaxTenantEngines: 10_000,
	}
}

// DialCluster is the default Dial: a client with TCP keepalives, so a
// silently dropped connection surfaces as an error instead of a stuck watch.
func DialCluster(_ string, endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
	})
}

// Router routes lock names to clusters by the shard map stored in the home
// cluster, and follows it as it changes. It is safe for concurrent use.
type Router struct {
	cfg   RouterConfig
	store *Store

	mu       sync.RWMutex
	m        Map
	ring     *Ring
	prev     *Ring
	draining map[string]bool
	backends map[string]*Backend
	changed  chan struct{} // closed and replaced on every applied map

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewRouter loads the map from the home cluster, storing initial if none
// is stored yet, dials every cluster it names and starts following it.
func NewRouter(ctx context.Context, home *clientv3.Client, initial Map, cfg RouterConfig) (*Router, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	cfg.Prefix = normPrefix(cfg.Prefix)
	cfg.Queue.Prefix = cfg.Prefix
	if cfg.Dial == nil {
		cfg.Dial = DialCluster
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Queue.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Breaker.Validate(); err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, store: NewStore(home, cfg.Prefix), backends: map[string]*Backend{}, changed: make(chan struct{})}
	snap, err := r.store.Load(ctx)
	if errors.Is(err, ErrNoMap) {
		if err = initial.Validate(); err != nil {
			return nil, err
		}
		snap, err = r.store.CompareAndSwap(ctx, Snapshot{}, initial)
		if errors.Is(err, ErrMapConflict) {
			snap, err = r.store.Load(ctx)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("shard: load the shard map: %w", err)
	}
	if err := r.apply(snap.Map); err != nil {
		r.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	if cfg.Watch {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for m := range r.store.Watch(wctx) {
				if err := r.apply(m); err != nil {
					r.cfg.Log.Error("shard map not applied", "epoch", m.Epoch, "err", err)
				}
			}
		}()
	}
	return r, nil
}

// apply makes m the map in force, dialling clusters it names for the first
// time. Maps older than the one in force are ignored.
func (r *Router) apply(m Map) error {
	ring, err := m.Ring()
	if err != nil {
		return err
	}
	prev, err := m.PreviousRing()
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ring != nil && m.Epoch < r.m.Epoch {
		return nil
	}
	for _, c := range append(append([]Cluster(nil), m.Clusters...), m.Previous...) {
		if _, ok := r.backends[c.Name]; ok {
			continue
		}
		b, err := r.dial(c)
		if err != nil {
			return err
		}
		r.backends[c.Name] = b
	}
	draining := map[string]bool{}
	for _, d := range m.Draining {
		draining[d] = true
	}
	if r.ring != nil && m.Epoch != r.m.Epoch {
		r.cfg.Log.Info("shard map in force", "epoch", m.Epoch, "clusters", m.ClusterNames(), "draining", m.Draining)
	}
	r.m, r.ring, r.prev, r.draining = m, ring, prev, draining
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

func (r *Router) dial(c Cluster) (*Backend, error) {
	eps := c.Endpoints
	if o, ok := r.cfg.Endpoints[c.Name]; ok {
		eps = o
	}
	cli, err := r.cfg.Dial(c.Name, eps)
	if err != nil {
		return nil, fmt.Errorf("shard: dial cluster %q: %w", c.Name, err)
	}
	qc := r.cfg.Queue
	qc.Telemetry.Cluster = c.Name
	eng, err := queue.New(cli, qc)
	if err != nil {
		cli.Close()
		return nil, err
	}
	bc := r.cfg.Breaker
	br, err := NewBreaker(c.Name, bc)
	if err != nil {
		eng.Close()
		cli.Close()
		return nil, err
	}
	return &Backend{Name: c.Name, Client: cli, Engine: eng, Breaker: br, qcfg: qc, maxTenants: r.cfg.MaxTenantEngines}, nil
}

// Route returns where name's calls go under the map in force.
func (r *Router) Route(name string) (Route, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	owner := r.ring.Locate(name)
	rt := Route{Backend: r.backends[owner], Epoch: r.m.Epoch, Guard: EpochCompare(r.cfg.Prefix, r.m.Epoch)}
	if len(r.draining) > 0 && r.prev != nil {
		if p := r.prev.Locate(name); p != owner && r.draining[p] {
			rt.Previous = r.backends[p]
		}
	}
	return rt, nil
}

// Backend returns the cluster called name, including clusters the map in
// force keeps only while they drain.
func (r *Router) Backend(name string) (*Backend, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, ok := r.backends[name]
	return b, ok
}

// Backends lists the clusters names are hashed over, in map order.
func (r *Router) Backends() []*Backend {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Backend, 0, len(r.m.Clusters))
	for _, c := range r.m.Clusters {
		out = append(out, r.backends[c.Name])
	}
	return out
}

// Map returns the map in force.
func (r *Router) Map() Map {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m
}

// AwaitNewer is called after a cluster refused an enqueue routed by epoch:
// it reloads the stored map and returns once a map newer than epoch is in
// force, or ctx ends. Between a cluster's epoch bump and the new map's
// activation it waits; callers bound it with ctx.
func (r *Router) AwaitNewer(ctx context.Context, epoch uint16) error {
	for {
		r.mu.RLock()
		cur, ch := r.m.Epoch, r.changed
		r.mu.RUnlock()
		if cur > epoch {
			return nil
		}
		if snap, err := r.store.Load(ctx); err == nil && snap.Map.Epoch > epoch {
			if err := r.apply(snap.Map); err != nil {
				return err
			}
			continue
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("shard: no map newer than epoch %d yet: %w", epoch, ctx.Err())
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// Close stops following the map and closes every cluster's engine and client.
func (r *Router) Close() {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.backends {
		b.close()
	}
	r.backends = map[string]*Backend{}
}
