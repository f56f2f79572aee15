package report

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/leasegate/leasegate/loadtest/internal/scenario"
)

// PinnedRatio is one system of the pinned scenario against
// concurrency.Mutex: each figure the system's ÷ Mutex's, nil where either
// is missing or Mutex's is zero.
type PinnedRatio struct {
	System string `json:"system"`
	// PerSec is cycles/s; above 1 the system does more cycles on the same
	// etcd.
	PerSec *float64 `json:"per_s"`
	// EtcdCPU is the etcd process's CPU per cycle; below 1 the system
	// costs etcd less CPU per cycle.
	EtcdCPU *float64 `json:"etcd_cpu_per_op"`
	// EtcdWrites is raft entries per cycle.
	EtcdWrites *float64 `json:"etcd_writes_per_op"`
}

// PinnedRatios divides every other system's figures by Mutex's.
func PinnedRatios(pn *scenario.Pinned) []PinnedRatio {
	m := find(pn.Runs, scenario.Mutex)
	if m == nil {
		return nil
	}
	div := func(a, b *float64) *float64 {
		if a == nil || b == nil || *b == 0 {
			return nil
		}
		return val(*a / *b)
	}
	var out []PinnedRatio
	for i := range pn.Runs {
		x := &pn.Runs[i]
		if x.System == scenario.Mutex {
			continue
		}
		out = append(out, PinnedRatio{
			System:     x.System,
			PerSec:     div(&x.PerSec, &m.PerSec),
			EtcdCPU:    div(x.EtcdCPUPerOpUs, m.EtcdCPUPerOpUs),
			EtcdWrites: div(x.EtcdWritesPerOp, m.EtcdWritesPerOp),
		})
	}
	return out
}

func pinnedSection(b *bytes.Buffer, pn *scenario.Pinned, ratios []PinnedRatio) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	workers := 0
	if len(pn.Runs) > 0 {
		workers = pn.Runs[0].Workers
	}
	p("## Pinned: etcd on CPUs of its own\n\n")
	p("etcd runs in a process of its own on CPU %s (its threads were allowed %s; it listened on %s); the gateway and the load generator run in this process on CPU %s (allowed %s). "+
		"%d clients acquire and release a name each, back to back. *etcd CPU* is the etcd process's user + system time (/proc/<pid>/stat) over the measured windows, "+
		"*raft entries* the growth of the member's applied index, each ÷ cycles; *busy* is CPU-seconds per second, against the CPUs the process was given. "+
		"*gateway + load CPU* is this process's.\n\n",
		pn.EtcdCPUs, strings.Join(pn.EtcdThreadCPUs, " and "), strings.Join(pn.EtcdListens, ", "), pn.GatewayCPUs, strings.Join(pn.GatewayThreadCPUs, " and "), workers)
	p("| system | cycles/s | p50 | p99 | etcd CPU µs/cycle | etcd busy | raft entries/cycle | gateway + load CPU µs/cycle | gateway + load busy | errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range pn.Runs {
		p("| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %d |\n", x.System, x.PerSec, msf(x.Latency.P50Ms), msf(x.Latency.P99Ms),
			cpuText(x.EtcdCPUPerOpUs), busy(x.EtcdCPUPerOpUs, x.PerSec), perOp(x.EtcdWritesPerOp),
			cpuText(x.CPUPerOpUs), busy(x.CPUPerOpUs, x.PerSec), x.Errors)
	}
	p("\n")
	if len(ratios) > 0 {
		p("Each system ÷ concurrency.Mutex, same run, same etcd:\n\n| system | cycles/s | etcd CPU/cycle | raft entries/cycle |\n|---|---|---|---|\n")
		for _, x := range ratios {
			p("| %s | %s | %s | %s |\n", x.System, ratioText(x.PerSec), ratioText(x.EtcdCPU), ratioText(x.EtcdWrites))
		}
		p("\n")
	}
	notes(b, pn.Notes)
}

// busy is CPU-seconds per second: CPU per operation times operations per
// second.
func busy(usPerOp *float64, perSec float64) string {
	if usPerOp == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", *usPerOp*perSec/1e6)
}

func ratioText(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", *v)
}
