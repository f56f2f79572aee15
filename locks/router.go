package locks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// RouterConfig configures a Router.
type RouterConfig struct {
	// Prefix is the etcd key prefix shared with the engines. Default
	// shard.DefaultPrefix.
	Prefix string
	// Queue configures each cluster's engine; its Prefix is set to Prefix.
	Queue queue.Config
	// Breaker configures each cluster's breaker; its Probe is set per
	// cluster (Backend.Ping through the cluster's Reach).
	Breaker shard.BreakerConfig
	// Reach bounds each cluster's calls' wait for a connection; its Probe
	// is set per cluster (a serializable read, which needs no leader).
	Reach shard.ReachConfig
	// Endpoints, by cluster name, override the endpoints stored in the map
	// with what this process knows (embedded clusters, local addresses).
	Endpoints map[string][]string
	// Dial connects to a cluster. Default shard.DialCluster.
	Dial func(name string, endpoints []string) (*clientv3.Client, error)
	// Watch follows the stored map; without it the router only reloads
	// when asked. Default true through DefaultRouterConfig.
	Watch bool
	// RequestTimeout bounds each call's work against a cluster (Bound):
	// an enqueue, a read, a renewal, one shard's part of a fan-out. A wait
	// for a grant is not bounded by it. Default (and 0) 10 s.
	RequestTimeout time.Duration
	// Clock times RequestTimeout and the wait for a newer map. Default
	// the wall clock.
	Clock clock.Clock
	// Log receives routing events; nil discards them.
	Log *slog.Logger
}

// DefaultRouterConfig returns the documented defaults.
func DefaultRouterConfig() RouterConfig {
	return RouterConfig{
		Prefix:         shard.DefaultPrefix,
		Queue:          queue.DefaultConfig(),
		Breaker:        shard.DefaultBreakerConfig(),
		Watch:          true,
		RequestTimeout: 10 * time.Second,
	}
}

// Validate reports the first invalid field: a negative RequestTimeout,
// or what the engine's (queue.Config.Validate, its Prefix taken from
// Prefix) or the breaker's (shard.BreakerConfig.Validate) validation
// reports. Zero fields that have a default are valid.
func (c RouterConfig) Validate() error {
	if c.RequestTimeout < 0 {
		return fmt.Errorf("locks: RequestTimeout %s is negative; want a positive duration, or 0 for the default", c.RequestTimeout)
	}
	if err := shard.CheckPrefix(c.Prefix); err != nil {
		return fmt.Errorf("locks: %w", err)
	}
	q := c.Queue
	q.Prefix = cmp.Or(strings.TrimSuffix(c.Prefix, "/"), shard.DefaultPrefix)
	if err := q.Validate(); err != nil {
		return err
	}
	return c.Breaker.Validate()
}

// Router routes lock names to the engines of the clusters that own them,
// by the shard map stored in the home cluster, and follows the map as it
// changes. It owns every cluster's client, engine and breaker. It is safe
// for concurrent use.
type Router struct {
	cfg   RouterConfig
	store *shard.Store

	mu       sync.RWMutex
	m        shard.Map
	ring     *shard.Ring
	prev     *shard.Ring
	draining map[string]bool
	backends map[string]*Backend
	changed  chan struct{} // closed and replaced on every applied map

	keys sync.Map // tenantShard → *keyCount, for checkKeys

	// layout is the map watch's refusal of the layout record (an error
	// wrapping shard.ErrLayout), nil while the record is this build's.
	layout atomic.Pointer[error]

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewRouter loads the map from the home cluster, storing initial if none
// is stored yet, dials every cluster it names and starts following it.
func NewRouter(ctx context.Context, home *clientv3.Client, initial shard.Map, cfg RouterConfig) (*Router, error) {
	cfg.Prefix = strings.TrimSuffix(cmp.Or(cfg.Prefix, shard.DefaultPrefix), "/")
	cfg.Queue.Prefix = cfg.Prefix
	if cfg.Dial == nil {
		cfg.Dial = shard.DialCluster
	}
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	cfg.Clock = cmp.Or(cfg.Clock, clock.Real)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, DefaultRouterConfig().RequestTimeout)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, store: shard.NewStore(home, cfg.Prefix), backends: map[string]*Backend{}, changed: make(chan struct{})}
	snap, err := r.store.Load(ctx)
	if errors.Is(err, shard.ErrNoMap) {
		if err = initial.Validate(); err != nil {
			return nil, err
		}
		snap, err = r.store.CompareAndSwap(ctx, shard.Snapshot{}, initial)
		if errors.Is(err, shard.ErrMapConflict) {
			snap, err = r.store.Load(ctx)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("locks: load the shard map: %w", err)
	}
	if err := r.apply(snap.Map); err != nil {
		r.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	if cfg.Watch {
		r.store.OnLayoutChange(r.layoutChanged)
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

// layoutChanged hears the map watch on the layout record. While the
// record names another layout no map is applied and Ping reports every
// shard unavailable, so the gateway reads as not ready and its load
// balancer drains it; the locks it holds are served until they end.
func (r *Router) layoutChanged(err error) {
	if err != nil {
		r.layout.Store(&err)
		r.cfg.Log.Error("shard map updates refused and this gateway is not ready: stop it before the keys are migrated", "err", err)
		return
	}
	r.layout.Store(nil)
	r.cfg.Log.Info("the layout record is this build's again: following the shard map")
}

// LayoutRefused returns the map watch's refusal of the layout record
// (wrapping shard.ErrLayout), or nil while the record is this build's.
func (r *Router) LayoutRefused() error {
	if p := r.layout.Load(); p != nil {
		return *p
	}
	return nil
}

// apply makes m the map in force, dialling clusters it names for the first
// time. Maps older than the one in force are ignored.
func (r *Router) apply(m shard.Map) error {
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
	for _, c := range append(append([]shard.Cluster(nil), m.Clusters...), m.Previous...) {
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

func (r *Router) dial(c shard.Cluster) (*Backend, error) {
	eps := c.Endpoints
	if o, ok := r.cfg.Endpoints[c.Name]; ok {
		eps = o
	}
	cli, err := r.cfg.Dial(c.Name, eps)
	if err != nil {
		return nil, fmt.Errorf("locks: dial cluster %q: %w", c.Name, err)
	}
	qc := r.cfg.Queue
	qc.Telemetry.Cluster = c.Name
	eng, err := queue.New(cli, qc)
	if err != nil {
		cli.Close()
		return nil, err
	}
	b := &Backend{Name: c.Name, Client: cli, Engine: eng}
	rc := r.cfg.Reach
	rc.Probe = b.answers
	b.Reach = shard.NewReach(c.Name, cli.ActiveConnection(), rc)
	bc := r.cfg.Breaker
	bc.Probe = func(ctx context.Context) error {
		if err := b.Reach.Reconnect(ctx); err != nil {
			return err
		}
		return b.Reach.Call(ctx, b.Ping)
	}
	if b.Breaker, err = shard.NewBreaker(c.Name, bc); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// Route returns where name's calls go under the map in force, with the
// cluster's engine acting in tenant's key space ("" is the unnamed
// tenant): the cluster that owns the name, the epoch and guard new waiters
// enqueue under, and, while the name drains from the cluster that owned it
// before a resharding, that cluster as Previous.
func (r *Router) Route(name, tenant string) (Target, error) {
	r.mu.RLock()
	owner := r.ring.Locate(name)
	b, epoch := r.backends[owner], r.m.Epoch
	var prev *Backend
	if len(r.draining) > 0 && r.prev != nil {
		if p := r.prev.Locate(name); p != owner && r.draining[p] {
			prev = r.backends[p]
		}
	}
	r.mu.RUnlock()
	if b == nil {
		return Target{}, fmt.Errorf("%w: no client for the shard that owns the name", shard.ErrShardUnavailable)
	}
	t, err := b.target(tenant)
	if err != nil {
		return Target{}, err
	}
	t.Epoch, t.Guards = epoch, []clientv3.Cmp{shard.EpochCompare(r.cfg.Prefix, epoch)}
	if prev != nil {
		p, err := prev.target(tenant)
		if err != nil {
			return Target{}, err
		}
		t.Previous = &p
	}
	return t, nil
}

// Lookup returns the cluster called name, including clusters the map in
// force keeps only while they drain, with its engine acting in tenant's
// key space: for ids that name their shard. A name this router does not
// know is ErrUnknownShard.
func (r *Router) Lookup(name, tenant string) (Target, error) {
	b, ok := r.Backend(name)
	if !ok {
		return Target{}, fmt.Errorf("%w %q", ErrUnknownShard, name)
	}
	return b.target(tenant)
}

// All returns every cluster names are hashed over, in map order, with
// their engines acting in tenant's key space: for sessions, which hold a
// lease on each.
func (r *Router) All(tenant string) ([]Target, error) {
	var out []Target
	for _, b := range r.Backends() {
		t, err := b.target(tenant)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
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
func (r *Router) Map() shard.Map {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m
}

// Changed returns a channel that is closed when the next map is applied
// (the router follows the stored map by a watch). It does not block; a
// long-lived reader of one name routes again when it closes.
func (r *Router) Changed() <-chan struct{} {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.changed
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
			return fmt.Errorf("locks: no map newer than epoch %d yet: %w", epoch, ctx.Err())
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
