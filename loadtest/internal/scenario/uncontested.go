package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/system"
)

// uncontestedSystems are compared in the uncontested scenario.
var uncontestedSystems = []string{Direct, GatewaySession, GatewayPerLock, GatewayREST, Mutex, EtcdPut, RedsyncAlways, RedsyncEverysec}

// Uncontested measures acquire+release cycles on names nobody else takes:
// first one client at a time (the latency of a cycle, each system for
// Duration/2), then Workers clients at once, each on a name of its own
// (throughput, and latency under load). Every system uses the same names,
// on the same etcd cluster, in interleaved rounds.
func (e *Env) Uncontested(ctx context.Context) (*Uncontested, error) {
	out := &Uncontested{}
	names, err := e.Bed.HomeNames(ctx, "u", e.Cfg.Workers)
	if err != nil {
		return nil, err
	}
	for _, pass := range []struct {
		workers int
		dst     *[]Run
	}{{1, &out.Serial}, {e.Cfg.Workers, &out.Concurrent}} {
		systems, notes, err := e.openAll(ctx, uncontestedSystems, pass.workers)
		if err != nil {
			return nil, err
		}
		if pass.workers == 1 {
			out.Notes = append(out.Notes, notes...)
		}
		total := e.Cfg.Duration
		if pass.workers == 1 {
			total = max(e.Cfg.Duration/2, e.Cfg.Warmup)
		}
		*pass.dst, err = e.cycles(ctx, "uncontested", systems, names, pass.workers, total)
		if n := e.idleNote(fmt.Sprintf("%d client(s)", pass.workers)); n != "" {
			out.Notes = append(out.Notes, n)
		}
		if err != nil {
			return out, err
		}
	}
	return out, ctx.Err()
}

// cycles measures back-to-back acquire+release cycles of each opened
// system, worker w on names[w] alone, in interleaved rounds of total
// measured time per system, and closes the systems. It returns a Run per
// system measured, also when an error stopped the rounds.
func (e *Env) cycles(ctx context.Context, label string, systems []*opened, names []string, workers int, total time.Duration) ([]Run, error) {
	tallies := map[*opened]*tally{}
	err := e.rounds(ctx, systems, total, func(ctx context.Context, o *opened, p phase) error {
		t := tallies[o]
		if t == nil {
			t = newTally()
			tallies[o] = t
		}
		p.workers = workers
		p.label = fmt.Sprintf("%s %s ×%d", label, o.name, workers)
		e.closedLoop(ctx, p, o.name, t, func(ctx context.Context, w int) error {
			return cycle(ctx, o.clients[w], names[w], nil)
		})
		return nil
	})
	var runs []Run
	for _, o := range systems {
		if t := tallies[o]; t != nil {
			r := t.run(o.name, o.sys.Describe(), workers)
			runs = append(runs, r)
			e.logf("%s %-17s workers=%-3d %8.0f cycles/s  p50 %.2fms  p99 %.2fms  errors %d",
				label, o.name, workers, r.PerSec, r.Latency.P50Ms, r.Latency.P99Ms, r.Errors)
		}
		o.close()
	}
	return runs, err
}

// cycle acquires name and releases it at once.
func cycle(ctx context.Context, c system.Client, name string, onEnqueued func()) error {
	h, err := c.Acquire(ctx, name, onEnqueued)
	if err != nil {
		return fmt.Errorf("acquire %s: %w", name, err)
	}
	if err := h.Release(ctx); err != nil {
		return fmt.Errorf("release %s: %w", name, err)
	}
	return nil
}
