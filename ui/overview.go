package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
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
	// Scope says whose figures these are: ScopeProcess, every tenant's,
	// for the process's operator; ScopeTenant, the caller's tenant's only,
	// for anyone else.
	Scope string `json:"scope"`
	// Shards are the clusters names are hashed over, in map order.
	Shards []ShardOverview `json:"shards"`
	// Metrics says whether the gateway keeps metrics; without them the
	// keepalive counts and Handoff are absent.
	Metrics bool `json:"metrics"`
	// SessionKeepalives counts the session keepalives this gateway has
	// answered since it started, for every tenant: ScopeProcess only.
	SessionKeepalives *int64 `json:"sessionKeepalives,omitempty"`
	// Handoff is the handoff-latency histogram over every shard and
	// tenant since the gateway started: ScopeProcess only.
	Handoff *Histogram `json:"handoff,omitempty"`
}

// Scopes of an Overview.
const (
	// ScopeProcess is every tenant's figures, the process's metrics
	// included: for the operator, a caller with gateway.RoleOperator (the
	// local operator has it without authentication).
	ScopeProcess = "process"
	// ScopeTenant is the caller's tenant's figures: its own held locks and
	// waiters. The process's metrics cover every tenant and are left out.
	ScopeTenant = "tenant"
)

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
	// Held counts names with a holder (a semaphore's holders are one
	// name); Waiting counts the keys that wait behind the holders, judged
	// by the engine's grant rule, over the Overview's scope: every
	// tenant's, or the caller's tenant's. Both are absent when the count
	// failed.
	Held    *int64 `json:"held,omitempty"`
	Waiting *int64 `json:"waiting,omitempty"`
	// Partial says the counts stopped at Config.ScanLimit keys.
	Partial bool `json:"partial,omitempty"`
	// CountError says why the counts are absent.
	CountError string `json:"countError,omitempty"`
	// Renewals counts the Renew calls this gateway has answered for locks
	// on the shard since it started, for every tenant: the page turns it
	// into a rate. ScopeProcess only.
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

// overview gathers the figures for id: every tenant's for the operator,
// id's tenant's for anyone else. The shards' health and counts are read
// from etcd concurrently, the counts through each shard's breaker, each
// read bounded on its own (a dead shard costs one ScanTimeout, not every
// other shard's figures). A shard's health and breaker are shown to
// every caller: they are the state its own calls meet.
func (c *Console) overview(ctx context.Context, id gateway.Identity) Overview {
	m := c.cfg.Router.Map()
	o := Overview{Time: time.Now().UTC(), Epoch: m.Epoch, Identity: Identity{Tenant: id.Tenant, Subject: id.Subject, Method: id.Method, Roles: id.Roles}}
	sc := scope{key: ScopeProcess}
	if id.HasRole(gateway.RoleOperator) {
		o.Scope = ScopeProcess
	} else {
		o.Scope, sc = ScopeTenant, scope{key: "t/" + id.Tenant, tenant: id.Tenant, own: true}
	}
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
	counts := c.counts(ctx, backends, sc)
	status := <-health
	for i, b := range backends {
		if b == nil {
			continue
		}
		o.Shards[i] = counts[i]
		o.Shards[i].Name, o.Shards[i].Health, o.Shards[i].Breaker = b.Name, status[b.Name], b.Breaker.State().String()
	}
	if c.cfg.Metrics == nil {
		return o
	}
	o.Metrics = true
	if o.Scope != ScopeProcess {
		return o
	}
	if mv, err := readMetrics(c.cfg.Metrics); err == nil {
		o.SessionKeepalives = &mv.sessionKeepalives
		o.Handoff = mv.handoff
		for i := range o.Shards {
			n := mv.renewals[o.Shards[i].Name]
			o.Shards[i].Renewals = &n
		}
	}
	return o
}

// scope is whose keys a count reads.
type scope struct {
	key    string // the counts' cache key
	tenant string // with own: the tenant whose keys are read
	own    bool   // false: every tenant's
}

// prefix is the range of b's keys the scope counts.
func (sc scope) prefix(b *locks.Backend) string {
	if sc.own {
		return queue.LocksPrefix(b.TenantPrefix(sc.tenant))
	}
	// Every key space's: the unnamed tenant's and each tenant's nested
	// below it.
	return b.TenantPrefix("") + "/"
}

// counted is one scope's last counts.
type counted struct {
	mu   sync.Mutex // held while counting: one count per scope at a time
	at   time.Time  // when rows were read
	rows []ShardOverview
	used time.Time // when last asked for, under Console.mu
}

// countsKept is how long a scope's counts are kept after they were last
// asked for: the cache holds the scopes of the consoles open now.
const countsKept = time.Minute

// counts returns each backend's held and waiting counts for sc, read at
// most once a second however many consoles of the scope ask: every open
// console polls, and the counts are the same for all of them. Scopes
// count apart, so one tenant's slow count delays no other's.
func (c *Console) counts(ctx context.Context, backends []*locks.Backend, sc scope) []ShardOverview {
	now := time.Now()
	c.mu.Lock()
	for k, e := range c.counted {
		if now.Sub(e.used) > countsKept {
			delete(c.counted, k)
		}
	}
	e := c.counted[sc.key]
	if e == nil {
		e = &counted{}
		c.counted[sc.key] = e
	}
	e.used = now
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if time.Since(e.at) < time.Second && len(e.rows) == len(backends) {
		return e.rows
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
			c.count(ctx, b, sc, &out[i])
		}()
	}
	wg.Wait()
	e.rows, e.at = out, time.Now()
	return out
}

// count fills s's held and waiting counts for sc from one keys-only read
// of sc's range on b. Each key is parsed by the key layout from the
// cluster's root down (queue.SplitWaiterKey, under the key space
// locks.Backend.EngineOf names), and each name's holders are judged by the
// engine's grant rule (queue.HeldCounts), which reads at the same
// revision the few values it needs: a semaphore of limit N has up to N
// holders, and a key refused for its limit holds nothing. The figure is a
// moment's.
func (c *Console) count(ctx context.Context, b *locks.Backend, sc scope, s *ShardOverview) {
	var names [][]*mvccpb.KeyValue
	var more bool
	var held []int
	err := b.Call(ctx, func(ctx context.Context) error {
		// Its own deadline: a hung cluster is then a failure the breaker
		// counts, as for any bounded call.
		ctx, cancel := context.WithTimeout(ctx, c.cfg.ScanTimeout)
		defer cancel()
		resp, err := b.Client.Get(ctx, sc.prefix(b), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(c.cfg.ScanLimit))
		if err != nil {
			return err
		}
		names, more = sc.names(b, resp.Kvs), resp.More
		held, err = queue.HeldCounts(ctx, b.Client, resp.Header.Revision, names)
		return err
	})
	if err != nil {
		s.CountError = err.Error()
		return
	}
	var holding, waiting int64
	for i, keys := range names {
		if held[i] > 0 {
			holding++
		}
		waiting += int64(len(keys) - held[i])
	}
	s.Held, s.Waiting, s.Partial = &holding, &waiting, more
}

// names groups the waiter keys among kvs, a read of sc's range on b in key
// order, by name; every other record is left out. A name's keys are
// contiguous in key order (its escaped segment has no '/').
func (sc scope) names(b *locks.Backend, kvs []*mvccpb.KeyValue) [][]*mvccpb.KeyValue {
	var out [][]*mvccpb.KeyValue
	last := ""
	for _, kv := range kvs {
		k := string(kv.Key)
		engine, ok := b.TenantPrefix(sc.tenant), true
		if !sc.own {
			engine, ok = b.EngineOf(k)
		}
		if !ok {
			continue
		}
		name, _, ok := queue.SplitWaiterKey(engine, k)
		if !ok {
			continue
		}
		if id := queue.NamePrefix(engine, name); id != last || len(out) == 0 {
			out, last = append(out, nil), id
		}
		out[len(out)-1] = append(out[len(out)-1], kv)
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	setSecurityHeaders(w.Header())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
