package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/stats"
	"github.com/leasegate/leasegate/loadtest/internal/system"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
)

// Mixed is the capacity model's check: a held-lock population renewing
// and a fixed rate of acquire+release cycles at once, per mode, on names
// spread over every cluster.
type Mixed struct {
	Runs  []MixedRun `json:"runs"`
	Notes []string   `json:"notes,omitempty"`
}

// MixedRun is one mode under the mixed load.
type MixedRun struct {
	Mode string `json:"mode"`
	// Locks held (renewing) through the window, by HoldClients clients,
	// with lease (or session) TTL TTLs.
	Locks       int     `json:"locks"`
	HoldClients int     `json:"hold_clients"`
	TTLs        float64 `json:"ttl_s"`
	// Cycles is the open loop of acquire+release cycles on top (its Rate,
	// latency, CPU, etcd writes and keepalives per cycle).
	Cycles OpenRun `json:"cycles"`
	// Per second of the window, everything together: process CPU seconds,
	// raft writes and keepalives over every cluster.
	CPUPerSec        float64 `json:"cpu_s_per_s"`
	WritesPerSec     float64 `json:"etcd_writes_per_s"`
	KeepalivesPerSec float64 `json:"keepalives_per_s"`
	// IdleCPUPerSec is the process's CPU with the locks held, before the
	// cycles start: renewals and the background.
	IdleCPUPerSec    float64 `json:"idle_cpu_s_per_s"`
	IdleWritesPerSec float64 `json:"idle_etcd_writes_per_s"`
	IdleKeepalives   float64 `json:"idle_keepalives_per_s"`
	Lost             int     `json:"lost"`
	Errors           int64   `json:"errors"`
}

// Mixed holds RenewLocks locks over RenewClients clients (TTL RenewTTL)
// in each mode — gateway sessions and per-lock leases — and, while they
// renew, offers acquire+release cycles at Rate from Workers clients of the
// same mode, for Duration after Warmup. Names are spread over every
// cluster, as a production keyspace would be. It reports CPU, etcd raft
// writes and keepalives per second, with the held locks alone and with the
// cycles on top, so that a model built from per-unit costs can be checked
// against it.
func (e *Env) Mixed(ctx context.Context) (*Mixed, error) {
	out := &Mixed{}
	if _, err := e.Bed.RaftIndex(ctx); err != nil {
		out.Notes = append(out.Notes, fmt.Sprintf("mixed: skipped, etcd's counts cannot be read: %v", err))
		return out, nil
	}
	for _, m := range []renewMode{
		{system: GatewaySession, locks: e.Cfg.RenewLocks},
		{system: GatewayPerLock, locks: e.Cfg.RenewLocks, perLock: true},
	} {
		r, err := e.mixed(ctx, m)
		if err != nil {
			return out, err
		}
		out.Runs = append(out.Runs, r)
		e.logf("mixed       %-17s locks=%-6d rate=%-5.0f %6.0f cycles/s  cpu %.3f s/s (idle %.3f)  writes %.0f/s (idle %.0f)  keepalives %.0f/s (idle %.0f)  lost %d errors %d",
			m.system, r.Locks, r.Cycles.Rate, r.Cycles.PerSec, r.CPUPerSec, r.IdleCPUPerSec, r.WritesPerSec, r.IdleWritesPerSec, r.KeepalivesPerSec, r.IdleKeepalives, r.Lost, r.Errors)
		e.settle(ctx)
	}
	return out, ctx.Err()
}

func (e *Env) mixed(ctx context.Context, m renewMode) (MixedRun, error) {
	cfg := e.Cfg
	r := MixedRun{Mode: m.system, HoldClients: cfg.RenewClients, TTLs: cfg.RenewTTL.Seconds()}
	sys, err := system.NewGateway(e.Bed.Gateways, m.perLock, cfg.RenewTTL)
	if err != nil {
		return r, err
	}
	defer sys.Close()
	holders, err := openClients(ctx, sys, cfg.RenewClients)
	if err != nil {
		return r, err
	}
	var errs errSamples
	held := e.holdMany(ctx, holders, m, &errs)
	defer e.releaseMany(holders, held, m.perLock)
	r.Locks = len(held)
	cyclers, err := openClients(ctx, sys, cfg.Workers)
	if err != nil {
		return r, err
	}
	o := &opened{name: m.system, sys: sys, clients: cyclers}
	defer closeClients(cyclers)
	names := make([]string, cfg.Workers)
	for i := range names {
		names[i] = fmt.Sprintf("x%d-%s-%d", time.Now().UnixNano()%1e6, m.system, i)
	}

	// The held locks alone, for a renew interval at least.
	idle := max(cfg.RenewTTL/3, 2*time.Second)
	e.Bar.Start(fmt.Sprintf("mixed %s: %d locks renewing", m.system, r.Locks), idle, 0, func() int64 { return 0 })
	c0, cpu0, t0 := readCounts(e.Bed), testbed.CPU(), time.Now()
	pause(ctx, idle)
	c1, cpu1, s := readCounts(e.Bed), testbed.CPU(), time.Since(t0).Seconds()
	e.Bar.Done()
	r.IdleCPUPerSec = (cpu1 - cpu0).Seconds() / s
	if c0.ok && c1.ok {
		r.IdleWritesPerSec, r.IdleKeepalives = (c1.writes-c0.writes)/s, (c1.keepalives-c0.keepalives)/s
	}

	// The cycles on top.
	t := &openTally{tally: newTally(), svc: stats.NewHistogram()}
	p := phase{label: fmt.Sprintf("mixed %s %d locks + %.0f cycles/s", m.system, r.Locks, cfg.Rate),
		workers: cfg.Workers, warmup: cfg.Warmup, duration: cfg.Duration, maxOps: cfg.MaxRequests}
	e.openLoop(ctx, o, names, p, t)
	run := t.run(m.system, sys.Describe(), cfg.Workers)
	r.Cycles = OpenRun{Run: run, Rate: cfg.Rate, Service: t.svc.Summary(), Delayed: t.delayed.Load(), Unfinished: t.unfinished.Load()}
	if t.seconds > 0 {
		r.CPUPerSec = t.busy.Seconds() / t.seconds
		r.WritesPerSec, r.KeepalivesPerSec = t.writes/t.seconds, t.keepalives/t.seconds
	}
	for _, h := range held {
		if l, ok := h.(interface{ Err() error }); ok && l.Err() != nil {
			r.Lost++
		}
	}
	r.Errors = errs.n.Load() + run.Errors
	return r, ctx.Err()
}
