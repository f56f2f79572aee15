package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/leasegate/leasegate/loadtest/internal/scenario"
)

// Figure is one of the ratios the performance work is judged by, measured
// side by side in one run.
type Figure struct {
	// Name says what is divided by what.
	Name string `json:"name"`
	// Value is the ratio (or, for memory, KiB), nil when not measured;
	// Shown is how the report prints it, Detail the figures behind it.
	Value  *float64 `json:"value"`
	Shown  string   `json:"shown"`
	Detail string   `json:"detail,omitempty"`
	// Scenario measures it.
	Scenario string `json:"scenario"`
}

// Figures computes the performance work's figures from whatever ran.
func Figures(r *Results) []Figure {
	var out []Figure
	ratio := func(name, scn string, a, b float64, unit string, digits int) {
		v := math.NaN()
		if b > 0 && a > 0 {
			v = a / b
		}
		f := Figure{Name: name, Value: val(v), Shown: num(v), Scenario: scn}
		if !math.IsNaN(v) {
			f.Detail = fmt.Sprintf("%.*f %s ÷ %.*f %s", digits, a, unit, digits, b, unit)
		}
		out = append(out, f)
	}
	cpu := func(x *scenario.Run) float64 {
		if x == nil || x.CPUPerOpUs == nil {
			return math.NaN()
		}
		return *x.CPUPerOpUs
	}
	perSec := func(x *scenario.Run) float64 {
		if x == nil {
			return math.NaN()
		}
		return x.PerSec
	}
	p50 := func(x *scenario.Run) float64 {
		if x == nil {
			return math.NaN()
		}
		return x.Latency.P50Ms
	}
	w := r.Config.Workers
	if u := r.Uncontested; u != nil {
		c := u.Concurrent
		d, m := find(c, scenario.Direct), find(c, scenario.Mutex)
		gateways := []struct{ sys, what string }{
			{scenario.GatewaySession, "session (Connect SDK)"},
			{scenario.GatewayPerLock, "per-lock (Connect SDK)"},
			{scenario.GatewayREST, "per-lock (REST)"},
		}
		for _, s := range gateways {
			ratio(fmt.Sprintf("CPU per uncontested cycle, %d clients: gateway %s ÷ direct etcd txns", w, s.what), "uncontested",
				cpu(find(c, s.sys)), cpu(d), "µs", 0)
		}
		for _, s := range gateways {
			ratio(fmt.Sprintf("cycles/s, %d workers: gateway %s ÷ concurrency.Mutex", w, s.what), "uncontested",
				perSec(find(c, s.sys)), perSec(m), "/s", 0)
		}
		ratio("uncontested cycle p50, 1 client: gateway session ÷ direct etcd txns", "uncontested",
			p50(find(u.Serial, scenario.GatewaySession)), p50(find(u.Serial, scenario.Direct)), "ms", 2)
	}
	if c := r.Contended; c != nil {
		var g, m float64 = math.NaN(), math.NaN()
		for _, x := range c.Runs {
			switch x.System {
			case scenario.GatewaySession:
				g = x.Handoff.P50Ms
			case scenario.Mutex:
				m = x.Handoff.P50Ms
			}
		}
		ratio(fmt.Sprintf("contended handoff p50 (%d clients per name, %.0f ms hold): gateway ÷ concurrency.Mutex", c.Waiters, c.HoldMs), "contended", g, m, "ms", 2)
		if dh := c.Delayed; dh != nil {
			put := p50(find(dh.Runs, scenario.EtcdPut))
			ratio(fmt.Sprintf("handoff p50, release %.0f ms after the waiter's enqueue: gateway ÷ one etcd Put", dh.DelayMs), "contended",
				p50(find(dh.Runs, scenario.GatewaySession)), put, "ms", 2)
			ratio("… the same for concurrency.Mutex ÷ one etcd Put", "contended",
				p50(find(dh.Runs, scenario.Mutex)), put, "ms", 2)
		}
		if dr := c.Drain; dr != nil {
			var g, m float64 = math.NaN(), math.NaN()
			for _, x := range dr.Runs {
				switch x.System {
				case scenario.GatewaySession:
					g = x.MedianS
				case scenario.Mutex:
					m = x.MedianS
				}
			}
			ratio(fmt.Sprintf("drain of %d streaming waiters on one name (median): gateway ÷ concurrency.Mutex chain", dr.Waiters), "contended", g, m, "s", 3)
		}
		if wm := c.WaiterMemory; wm != nil {
			for _, x := range wm.Runs {
				f := Figure{Name: fmt.Sprintf("gateway memory per queued streaming waiter, %s connection(s), KiB (heap + stacks, etcd's share left out)", x.Connections), Scenario: "contended", Shown: "n/a"}
				if x.Error == "" {
					f.Value, f.Shown = val(x.GatewayKiB), fmt.Sprintf("%.1f", x.GatewayKiB)
					var parts []string
					for _, l := range []string{"HTTP/2 + Connect", "gateway logic", "etcd client", "etcd server"} {
						if v, ok := x.HeapByLayerB[l]; ok {
							parts = append(parts, fmt.Sprintf("%s %.1f", l, v/1024))
						}
					}
					f.Detail = fmt.Sprintf("%d waiters; with etcd's share %.1f KiB: heap %.1f KiB, stacks %.1f KiB, %.2f goroutines; heap by layer (KiB): %s", x.Waiters, x.TotalKiB, x.HeapB/1024, x.StackB/1024, x.Goroutines, strings.Join(parts, ", "))
				} else {
					f.Detail = x.Error
				}
				out = append(out, f)
			}
		}
	}
	return out
}
