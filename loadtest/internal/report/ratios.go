package report

import (
	"fmt"
	"math"

	"github.com/leasegate/leasegate/loadtest/internal/scenario"
)

// Ratio is one headline figure of the performance goals, measured.
type Ratio struct {
	// Figure names what is divided by what.
	Figure string `json:"figure"`
	// Goal is the figure's target (docs/benchmarks.md, "Results against
	// the performance goals", states them all).
	Goal string `json:"goal"`
	// Value is the measured figure, nil when it could not be measured;
	// Shown is how the report prints it.
	Value *float64 `json:"value"`
	Shown string   `json:"shown"`
	// Met says whether the goal was met; nil when not measured.
	Met *bool `json:"met,omitempty"`
	// Scenario is the scenario that measures it (for the command).
	Scenario string `json:"scenario"`
	// Why explains a goal not met or a figure not measured.
	Why string `json:"why,omitempty"`
}

func met(b bool) *bool { return &b }

// Ratios computes the headline figures from whatever scenarios ran.
func Ratios(r *Results) []Ratio {
	var out []Ratio
	if u := r.Uncontested; u != nil {
		for _, pass := range []struct {
			label string
			runs  []scenario.Run
		}{{"1 client", u.Serial}, {fmt.Sprintf("%d clients", r.Config.Workers), u.Concurrent}} {
			g, d := find(pass.runs, scenario.GatewaySession), find(pass.runs, scenario.Direct)
			p50, p99 := math.NaN(), math.NaN()
			if g != nil && d != nil && d.Latency.P50Ms > 0 && d.Latency.P99Ms > 0 {
				p50, p99 = g.Latency.P50Ms/d.Latency.P50Ms, g.Latency.P99Ms/d.Latency.P99Ms
			}
			out = append(out, Ratio{
				Figure:   "uncontested acquire+release, gateway (session) ÷ direct etcd txns, p50 / p99, " + pass.label,
				Goal:     "≤ 1.2 / ≤ 1.5",
				Value:    val(p50),
				Shown:    pair(p50, p99),
				Met:      both(p50, p99, func(a, b float64) bool { return a <= 1.2 && b <= 1.5 }),
				Scenario: "uncontested",
			})
		}
		g, m := find(u.Concurrent, scenario.GatewaySession), find(u.Concurrent, scenario.Mutex)
		v := math.NaN()
		if g != nil && m != nil && m.PerSec > 0 {
			v = g.PerSec / m.PerSec
		}
		out = append(out, Ratio{
			Figure: fmt.Sprintf("cycles/s, gateway (session leases) ÷ concurrency.Mutex, %d workers", r.Config.Workers),
			Goal:   "≥ 1.0",
			Value:  val(v), Shown: num(v), Met: one(v, func(x float64) bool { return x >= 1.0 }),
			Scenario: "uncontested",
		})
	}
	if c := r.Contended; c != nil {
		var g, m *scenario.ContendedRun
		for i := range c.Runs {
			switch c.Runs[i].System {
			case scenario.GatewaySession:
				g = &c.Runs[i]
			case scenario.Mutex:
				m = &c.Runs[i]
			}
		}
		p50, p99 := math.NaN(), math.NaN()
		if g != nil && m != nil && m.Handoff.P50Ms > 0 && m.Handoff.P99Ms > 0 {
			p50, p99 = g.Handoff.P50Ms/m.Handoff.P50Ms, g.Handoff.P99Ms/m.Handoff.P99Ms
		}
		out = append(out, Ratio{
			Figure: "handoff latency (release → next waiter granted), gateway ÷ concurrency.Mutex, p50 / p99",
			Goal:   "≤ 1.0",
			Value:  val(p50), Shown: pair(p50, p99), Met: one(p50, func(x float64) bool { return x <= 1.0 }),
			Scenario: "contended",
		})
	}
	if rn := r.Renewal; rn != nil {
		var best *scenario.RenewalRun
		for i := range rn.Runs {
			if rn.Runs[i].Mode == scenario.GatewaySession && (best == nil || rn.Runs[i].Locks > best.Locks) {
				best = &rn.Runs[i]
			}
		}
		rt := Ratio{Figure: "etcd keepalives/s ÷ held locks (session mode)", Goal: "≤ clients/locks", Shown: "n/a", Scenario: "renewal"}
		if best != nil && best.Locks > 0 {
			rt.Value = val(best.PerLock)
			rt.Shown = fmt.Sprintf("%.2g (clients/locks = %.2g; %d locks, %d clients, %.1f keepalives/s)", best.PerLock, best.Bound, best.Locks, best.Clients, best.KeepalivesPerSec)
			rt.Met = met(best.PerLock <= best.Bound)
		}
		out = append(out, rt)
	}
	if cp := r.Capacity; cp != nil {
		v := float64(cp.Held)
		out = append(out, Ratio{
			Figure: fmt.Sprintf("held locks, %d-core machine, 3 embedded clusters", r.Machine.CPUs),
			Goal:   "1,000,000",
			Value:  val(v), Shown: fmt.Sprintf("%d (%s)", cp.Held, cp.StopReason), Met: met(cp.Held >= 1_000_000),
			Scenario: "capacity",
		})
	}
	return out
}

func find(runs []scenario.Run, name string) *scenario.Run {
	for i := range runs {
		if runs[i].System == name {
			return &runs[i]
		}
	}
	return nil
}

// val is v, or nil when it is not a number JSON can carry.
func val(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func pair(a, b float64) string { return num(a) + " / " + num(b) }

func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

func one(v float64, ok func(float64) bool) *bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return met(ok(v))
}

func both(a, b float64, ok func(a, b float64) bool) *bool {
	if math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return nil
	}
	return met(ok(a, b))
}
