// Package testbed sets up what a load test runs against: the gateway — an
// embedded one (three embedded etcd clusters and an in-process gateway), a
// pinned one (an in-process gateway over an etcd process, each on CPUs of
// its own) or the loopback gateways given —, the home etcd cluster the
// baselines share with it, and redis-server instances for the Redis
// baseline. It also reads what the systems cost: etcd's lease renewals,
// process CPU and memory.
package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/server"
)

// Config says what to run against.
type Config struct {
	// Endpoints are gateway base URLs on loopback; empty starts the
	// embedded setup.
	Endpoints []string
	// Etcd names the home cluster of external gateways for the baselines,
	// as "name=http://127.0.0.1:2379[,…]": the shard name the gateways know
	// it by, and its client URLs. Empty with Endpoints set skips the
	// baselines on etcd.
	Etcd string
	// Redis starts redis-server instances (appendfsync always and
	// everysec) when redis-server is installed.
	Redis bool
	// Log receives progress notes; nil discards them.
	Log io.Writer
	// Pin, when set, starts the pinned setup instead of the embedded one
	// (Endpoints must be empty, and Redis is not started).
	Pin *Pin
}

// Pin places etcd in a process of its own on EtcdCPUs, and this process —
// the gateway and the load generator — on GatewayCPUs: etcd is the scarce
// resource, as in production, where gateways scale out and etcd does not.
type Pin struct {
	// EtcdCPUs are the etcd process's CPUs. Required.
	EtcdCPUs CPUs
	// GatewayCPUs are this process's. Empty means every CPU this process
	// may use that is not etcd's.
	GatewayCPUs CPUs
}

// Bed is a running setup. Close tears down what it started.
type Bed struct {
	// Gateways are the gateway base URLs.
	Gateways []string
	// HomeShard is the shard name of the home cluster ("" when unknown).
	HomeShard string
	// HomeEtcd are the home cluster's client URLs (nil when unknown: the
	// etcd baselines are then skipped).
	HomeEtcd []string
	// Clusters maps every cluster the bed knows to its client URLs.
	Clusters map[string][]string
	// Redis holds the started redis-servers by appendfsync policy.
	Redis map[string]*Redis
	// Notes say what was skipped and why.
	Notes []string

	srv   *server.Server
	dir   string
	probe *client.Client
	log   io.Writer

	// etcd and pin are the pinned setup's etcd process and placement;
	// unpin gives this process its affinity back.
	etcd  *EtcdProcess
	pin   *Pin
	unpin func()

	statusMu sync.Mutex
	status   map[string]*clientv3.Client // by cluster, for RaftIndex
}

// Embedded reports whether the bed runs its own gateway and etcd in this
// process.
func (b *Bed) Embedded() bool { return b.srv != nil && b.etcd == nil }

// Pinned returns the pinned setup's placement, or nil for another setup.
func (b *Bed) Pinned() *Pin { return b.pin }

// EtcdProcess is the pinned setup's etcd process, or nil.
func (b *Bed) EtcdProcess() *EtcdProcess { return b.etcd }

// EtcdCPU is the CPU time the etcd process has used so far; ok is false
// when etcd is not a process of the bed's own (it is then in this
// process's CPU, or out of sight).
func (b *Bed) EtcdCPU() (cpu time.Duration, ok bool) {
	if b.etcd == nil {
		return 0, false
	}
	return b.etcd.CPU(), true
}

// Start sets the bed up. It fails on a non-loopback target.
func Start(ctx context.Context, cfg Config) (_ *Bed, err error) {
	b := &Bed{Clusters: map[string][]string{}, Redis: map[string]*Redis{}, log: cfg.Log}
	if b.log == nil {
		b.log = io.Discard
	}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	for _, ep := range cfg.Endpoints {
		if err := CheckURL(ep); err != nil {
			return nil, err
		}
	}
	switch {
	case cfg.Pin != nil && len(cfg.Endpoints) > 0:
		return nil, errors.New("the pinned setup starts its own gateway and etcd: give no endpoints")
	case cfg.Pin != nil:
		if err := b.startPinned(ctx, *cfg.Pin); err != nil {
			return nil, err
		}
	case len(cfg.Endpoints) == 0:
		if err := b.startEmbedded(ctx); err != nil {
			return nil, err
		}
	default:
		b.Gateways = cfg.Endpoints
		if err := b.useEtcd(cfg.Etcd); err != nil {
			return nil, err
		}
	}
	if b.probe, err = client.New(b.Gateways, client.WithClientID("loadtest-probe")); err != nil {
		return nil, err
	}
	switch {
	case cfg.Pin != nil: // the pinned setup measures etcd's cost: no Redis
	case cfg.Redis:
		b.startRedis(ctx)
	default:
		b.note("Redis baseline off (--redis=false).")
	}
	return b, nil
}

func (b *Bed) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.Notes = append(b.Notes, msg)
	fmt.Fprintln(b.log, "note:", msg)
}

func (b *Bed) startEmbedded(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "loadtest-etcd-")
	if err != nil {
		return err
	}
	b.dir = dir
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.EmbeddedShards = 3
	fmt.Fprintf(b.log, "starting 3 embedded etcd clusters and a gateway in %s\n", dir)
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("embedded setup: %w", err)
	}
	b.srv = srv
	b.Gateways = []string{srv.URL()}
	m := srv.Router().Map()
	for _, c := range m.Clusters {
		b.Clusters[c.Name] = c.Endpoints
	}
	home := m.Clusters[0]
	b.HomeShard, b.HomeEtcd = home.Name, home.Endpoints
	return nil
}

func (b *Bed) useEtcd(spec string) error {
	if spec == "" {
		b.note("No --etcd given for the external gateway: the etcd baselines (direct txns, concurrency.Mutex) and etcd-side counts are skipped.")
		return nil
	}
	name, urls, ok := strings.Cut(spec, "=")
	if !ok || name == "" || urls == "" {
		return fmt.Errorf("--etcd %q: want name=http://127.0.0.1:2379[,…], the shard name the gateway uses for that cluster", spec)
	}
	eps := strings.Split(urls, ",")
	for _, ep := range eps {
		if err := CheckURL(ep); err != nil {
			return fmt.Errorf("--etcd: %w", err)
		}
	}
	b.HomeShard, b.HomeEtcd = name, eps
	b.Clusters[name] = eps
	return nil
}

func (b *Bed) startRedis(ctx context.Context) {
	if RedisServerPath() == "" {
		b.note("redis-server is not installed, so the Redis (redsync) baseline is skipped; on Debian: apt-get install -y redis-server.")
		return
	}
	for _, fsync := range []string{"always", "everysec"} {
		r, err := StartRedis(ctx, fsync)
		if err != nil {
			b.note("Redis baseline (appendfsync %s) skipped: %v", fsync, err)
			continue
		}
		b.Redis[fsync] = r
	}
}

// Server is the embedded gateway process, or nil.
func (b *Bed) Server() *server.Server { return b.srv }

// HomeNames returns n distinct names, prefix-0, prefix-1, … skipping those
// that route to another cluster than the home one, so that the gateway and
// the baselines load the very same etcd. When the home cluster is unknown
// it returns the first n names.
func (b *Bed) HomeNames(ctx context.Context, prefix string, n int) ([]string, error) {
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		if i > 100*n+1000 {
			return nil, fmt.Errorf("found only %d of %d names on shard %q", len(out), n, b.HomeShard)
		}
		name := fmt.Sprintf("%s-%d", prefix, i)
		ok, err := b.onHome(ctx, name)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, name)
		}
	}
	return out, nil
}

func (b *Bed) onHome(ctx context.Context, name string) (bool, error) {
	switch {
	case b.HomeShard == "":
		return true, nil
	case b.srv != nil:
		r, err := b.srv.Router().Route(name, "")
		if err != nil {
			return false, err
		}
		return r.Shard == b.HomeShard, nil
	}
	// An external gateway: ask it, by taking the lock once.
	l, err := b.probe.TryAcquire(ctx, name, client.WithTTL(5*time.Second))
	if err != nil {
		return false, fmt.Errorf("probe %q: %w", name, err)
	}
	shard := l.Shard()
	if err := l.Release(ctx); err != nil {
		return false, err
	}
	return shard == b.HomeShard, nil
}

// Close stops what Start started: redis-servers, the gateway and its etcd
// clusters, and removes their data.
func (b *Bed) Close() {
	b.statusMu.Lock()
	for _, c := range b.status {
		_ = c.Close()
	}
	b.status = nil
	b.statusMu.Unlock()
	for _, r := range b.Redis {
		r.Close()
	}
	b.Redis = map[string]*Redis{}
	if b.probe != nil {
		_ = b.probe.Close()
		b.probe = nil
	}
	if b.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = b.srv.Shutdown(ctx)
		cancel()
		b.srv = nil
	}
	if b.etcd != nil {
		b.etcd.Close()
		b.etcd = nil
	}
	if b.unpin != nil {
		b.unpin()
		b.unpin = nil
	}
	if b.dir != "" {
		os.RemoveAll(b.dir)
		b.dir = ""
	}
}
