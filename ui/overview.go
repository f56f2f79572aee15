package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/locks"
	"github.com/leasegate/leasegate/queue"
)

// Overview is the answer of GET /ui/api/overview.
type Overview struct {
	// Time is when the figures were taken.
	Time time.Time `json:"time"`
	// Epoch is the shard map's epoch.
	Epoch uint16 `json:"epoch"`
	// Identity is the caller, as the gateway authenticated it.
	Identity Identity `json:"identity"`
	// Shards are the clusters names are hashed over, in map order.
	Shards []ShardOverview `json:"shards"`
	// Metrics says whether the gateway keeps metrics; without them the
	// keepalive counts and Handoff are absent.
	Metrics bool `json:"metrics"`
	// SessionKeepalives counts the session keepalives this gateway has
	// answered since it started.
	SessionKeepalives *int64 `json:"sessionKeepalives,omitempty"`
	// Handoff is the handoff-latency histogram over every shard since the
	// gateway started.
	Handoff *Histogram `json:"handoff,omitempty"`
}

// Identity is the caller as the page shows it.
type Identity struct {
	// Tenant owns the caller's locks; "" on a gateway without
	// authentication.
	Tenant string `json:"tenant"`
	// Subject names the caller within its tenant.
	Subject string `json:"subject"`
	// Method is how the caller proved it: mtls, token, jwt or none.
	Method string `json:"method"`
	// Roles are the roles its credentials grant (admin …).
	Roles []string `json:"roles,omitempty"`
}

// ShardOverview is one shard's row.
type ShardOverview struct {
	// Name is the cluster's name in the shard map.
	Name string `json:"name"`
	// Health is "ok" or "unavailable" (its etcd answers a read or not);
	// empty when unknown.
	Health string `json:"health"`
	// Breaker is the circuit breaker's state: closed, half-open or open.
	Breaker string `json:"breaker"`
	// Held counts names with a holder; Waiting counts the waiters behind
	// them, over every tenant. Both are absent when the count failed.
	Held    *int64 `json:"held,omitempty"`
	Waiting *int64 `json:"waiting,omitempty"`
	// Partial says the counts stopped at Config.ScanLimit keys.
	Partial bool `json:"partial,omitempty"`
	// CountError says why the counts are absent.
	CountError string `json:"countError,omitempty"`
	// Renewals counts the Renew calls this gateway has answered for locks
	// on the shard since it started: the page turns it into a rate.
	Renewals *int64 `json:"renewals,omitempty"`
}

func (c *Console) serveOverview(w http.ResponseWriter, r *http.Request) {
	id, err := gateway.IdentityFrom(r.Context())
	if err != nil {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]string{"code": "unauthenticated", "message": err.Error()}})
		return
	}
	writeJSON(w, http.StatusOK, c.overview(r.Context(), id))
}

// overview gathers the figures: the shards' health and counts are read
// from etcd concurrently, the counts through each shard's breaker, each
// read bounded on its own (a dead shard costs one ScanTimeout, not every
// other shard's figures).
func (c *Console) overview(ctx context.Context, id gateway.Identity) Overview {
	m := c.cfg.Router.Map()
	o := Overview{Time: time.Now().UTC(), Epoch: m.Epoch, Identity: Identity{Tenant: id.Tenant, Subject: id.Subject, Method: id.Method, Roles: id.Roles}}
	health := make(chan map[string]string, 1)
	go func() {
		if c.cfg.Health == nil {
			health <- nil
			return
		}
		health <- c.cfg.Health(ctx)
	}()
	backends := c.cfg.Router.Backends()
	o.Shards = make([]ShardOverview, len(backends))
	counts := c.counts(ctx, backends)
	status := <-health
	for i, b := range backends {
		if b == nil {
			continue
		}
		o.Shards[i] = counts[i]
		o.Shards[i].Name, o.Shards[i].Health, o.Shards[i].Breaker = b.Name, status[b.Name], b.Breaker.State().String()
	}
	if c.cfg.Metrics != nil {
		o.Metrics = true
		if mv, err := readMetrics(c.cfg.Metrics); err == nil {
			o.SessionKeepalives = &mv.sessionKeepalives
			o.Handoff = mv.handoff
			for i := range o.Shards {
				n := mv.renewals[o.Shards[i].Name]
				o.Shards[i].Renewals = &n
			}
		}
	}
	return o
}

// counts returns each backend's held and waiting counts, read at most
// once a second whoever asks: every open console polls, and the counts
// are the same for all of them.
func (c *Console) counts(ctx context.Context, backends []*locks.Backend) []ShardOverview {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.countedAt) < time.Second && len(c.counted) == len(backends) {
		return c.counted
	}
	out := make([]ShardOverview, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		if b == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.count(ctx, b, &out[i])
		}()
	}
	wg.Wait()
	c.counted, c.countedAt = out, time.Now()
	return out
}

// count fills s's held and waiting counts from one keys-only read of the
// shard's prefix. Every name with keys has one holder, the key that came
// first, and the rest wait behind it; the figure is a moment's, across
// every tenant's engine (their prefixes nest under the shard's).
func (c *Console) count(ctx context.Context, b *locks.Backend, s *ShardOverview) {
	prefix := b.Engine.Config().Prefix + "/"
	var resp *clientv3.GetResponse
	err := b.Call(ctx, func(ctx context.Context) error {
		// Its own deadline: a hung cluster is then a failure the breaker
		// counts, as for any bounded call.
		ctx, cancel := context.WithTimeout(ctx, c.cfg.ScanTimeout)
		defer cancel()
		var err error
		resp, err = b.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(c.cfg.ScanLimit))
		return err
	})
	if err != nil {
		s.CountError = err.Error()
		return
	}
	// Every engine's waiter keys, the shard's and each tenant's nested
	// below it, are <engine prefix>/locks/<escaped name>/<waiter id>
	// (queue.LocksPrefix, queue.NamePrefix).
	marker := queue.LocksPrefix("")
	names := map[string]bool{}
	var keys int64
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		i := strings.LastIndex(k, marker)
		if i < 0 {
			continue
		}
		j := strings.LastIndexByte(k, '/')
		if j <= i+len(marker) {
			continue
		}
		keys++
		names[k[:j]] = true
	}
	held, waiting := int64(len(names)), keys-int64(len(names))
	s.Held, s.Waiting, s.Partial = &held, &waiting, resp.More
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	setSecurityHeaders(w.Header())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
