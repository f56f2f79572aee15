package report

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/leasegate/leasegate/loadtest/internal/scenario"
)

// redisCaveat is said wherever Redis appears.
const redisCaveat = "Redis is not a like-for-like safety peer. With `appendfsync everysec` it acknowledges locks " +
	"that a crash can forget (up to a second of writes), so a restarted Redis can grant a held lock again; " +
	"`always` fsyncs every write but is still a single node (no replication, so a failover loses locks as well). " +
	"redsync issues no fencing tokens and keeps no queue: waiters poll with a random 50–250 ms delay. " +
	"etcd (under leasegate and under concurrency.Mutex) fsyncs every write to a raft log. " +
	"Read the Redis rows as what the weaker guarantee buys, not as a competitor at equal safety."

// Markdown renders the report. charts are linked by file name, relative to
// the report.
func Markdown(r *Results, charts []Chart) []byte {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# leasegate load test, %s\n\n", r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	p("Setup: %s.  \n", r.Setup)
	m := r.Machine
	p("Machine: %d CPUs (%s), %d GiB, Linux %s; %s; etcd %s", m.CPUs, m.CPUModel, m.MemoryGiB, m.Kernel, m.GoVersion, m.EtcdVersion)
	if m.RedisVersion != "" {
		p("; redis-server %s", m.RedisVersion)
	}
	p(".  \nCommand: `%s`  \nDuration: %s.\n\n", r.Command, r.Finished.Sub(r.Started).Round(1e9))
	if r.Pinned != nil {
		p("The machine is shared and noisy: absolute figures are noise, ratios measured side by side in this one run are the result.\n\n")
	} else {
		p("The machine is shared and noisy, and the load generator, the gateway and every etcd member share its cores: " +
			"absolute figures are noise, ratios measured side by side in this one run are the result.\n\n")
	}

	if len(r.Ratios) > 0 {
		p("## Headline ratios\n\n| figure | goal | measured | met |\n|---|---|---|---|\n")
		for _, x := range r.Ratios {
			p("| %s | %s | %s | %s |\n", x.Figure, x.Goal, x.Shown, metText(x.Met))
		}
		p("\n")
	}
	figuresSection(&b, r)
	byFile := map[string]Chart{}
	for _, c := range charts {
		byFile[c.File] = c
	}
	img := func(file string) {
		if c, ok := byFile[file]; ok {
			p("![%s](%s)\n\n", c.Caption, c.File)
		}
	}
	systems := map[string]string{}

	if u := r.Uncontested; u != nil {
		p("## Uncontested acquire+release\n\nEach client acquires and releases a name of its own, back to back; every system uses the same names on the same etcd cluster.\n\n")
		p("### One client\n\n")
		runTable(&b, u.Serial, "cycles/s")
		img("uncontested-latency-serial.svg")
		p("### %d clients\n\n", r.Config.Workers)
		runTable(&b, u.Concurrent, "cycles/s")
		img("uncontested-latency.svg")
		img("uncontested-throughput.svg")
		notes(&b, u.Notes)
		collect(systems, u.Serial)
		collect(systems, u.Concurrent)
	}
	if o := r.OpenLoop; o != nil {
		p("## Open loop\n\n")
		if len(o.Runs) > 0 {
			p("Cycles arrive at %.0f/s on a fixed schedule, whatever the latency, and are served by a pool of %d clients; "+
				"latency counts from each cycle's intended start, so a stall shows in the tail instead of slowing the load (no coordinated omission). "+
				"*Service* counts from the actual start; *delayed* cycles started over 1 ms after their intended time (every client busy, or the load generator itself waiting for a CPU).\n\n", o.Runs[0].Rate, o.Runs[0].Workers)
			p("| system | done/s | p50 | p90 | p99 | p99.9 | max | service p50 / p99 | delayed | unfinished | CPU µs/op | etcd writes/op | keepalives/op | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			for _, x := range o.Runs {
				l := x.Latency
				p("| %s | %.0f | %s | %s | %s | %s | %s | %s / %s | %d | %d | %s | %s | %s | %d |\n", x.System, x.PerSec,
					msf(l.P50Ms), msf(l.P90Ms), msf(l.P99Ms), msf(l.P999Ms), msf(l.MaxMs), msf(x.Service.P50Ms), msf(x.Service.P99Ms),
					x.Delayed, x.Unfinished, cpuText(x.CPUPerOpUs), perOp(x.EtcdWritesPerOp), perOp(x.KeepalivesPerOp), x.Errors)
				systems[x.System] = x.Describe
			}
			p("\n")
		}
		img("openloop-latency.svg")
		img("openloop-throughput.svg")
		notes(&b, o.Notes)
	}
	if c := r.Contended; c != nil {
		p("## Contended\n\n%d clients per name over %d names; each holds for %.1f ms, releases and queues again. "+
			"*Handoff* runs from the moment the holder calls release to the moment the next holder's acquire returns, counted when that client was already asking before the previous holder was granted (so it waited through the whole hold). "+
			"A *FIFO violation* is a grant while another client, whose place in line was confirmed before this one even asked, still waited (out of the grants made while someone else waited). "+
			"*Overlaps* are grants made while the previous holder had not yet begun its release. *Fairness* is Jain's index over grants per client.\n\n",
			c.Waiters, c.Names, c.HoldMs)
		p("| system | grants/s | handoff p50 | p90 | p99 | p99.9 | max | FIFO violations | overlaps | fairness (min–max grants) | wait p50 / p99 | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range c.Runs {
			h := x.Handoff
			p("| %s | %.0f | %s | %s | %s | %s | %s | %d / %d | %d | %.3f (%d–%d) | %s / %s | %d |\n", x.System, x.PerSec,
				msf(h.P50Ms), msf(h.P90Ms), msf(h.P99Ms), msf(h.P999Ms), msf(h.MaxMs), x.FIFOViolations, x.FIFOChecked, x.Overlaps,
				x.Fairness, x.MinGrants, x.MaxGrants, msf(x.Latency.P50Ms), msf(x.Latency.P99Ms), x.Errors)
			systems[x.System] = x.Describe
		}
		p("\n")
		img("contended-handoff.svg")
		img("contended-handoff-spectrum.svg")
		notes(&b, c.Notes)
		contendedExtra(&b, c)
		if c.Delayed != nil {
			collect(systems, c.Delayed.Runs)
		}
	}
	if rn := r.Renewal; rn != nil && len(rn.Runs) == 0 {
		p("## Renewal\n\n")
		notes(&b, rn.Notes)
	} else if rn != nil {
		p("## Renewal\n\nK locks held through a window of at least two renew intervals; *keepalives* are the lease renewals etcd's leader counted (%s). "+
			"Session locks are renewed through their session (one lease per session per cluster); per-lock locks each renew their own lease (TTL/3 apart). "+
			"CPU is this process's (load generator, gateway and etcd together).\n\n", rn.Scope)
		p("| mode | clients | locks | TTL | keepalives/s | ÷ locks | clients ÷ locks | etcd writes/s | CPU s/s | lost | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range rn.Runs {
			p("| %s | %d | %d | %.0f s | %.2f | %.3g | %.3g | %.2f | %.3f | %d | %d |\n", x.Mode, x.Clients, x.Locks, x.TTLs,
				x.KeepalivesPerSec, x.PerLock, x.Bound, x.WritesPerSec, x.CPUPerSec, x.Lost, x.Errors)
		}
		p("\n")
		notes(&b, rn.Notes)
	}
	if mx := r.Mixed; mx != nil {
		mixedSection(&b, mx)
	}
	if cp := r.Capacity; cp != nil {
		p("## Capacity\n\nSession locks on distinct names over every cluster (%d TryAcquire calls in flight over %d sessions) until the target, the time bound or the memory bound.\n\n", cp.Workers, cp.Sessions)
		p("| target | held | time | locks/s | stopped because | heap B/lock | RSS B/lock | etcd DB B/lock | RSS at end | TryAcquire p50 / p99 | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		p("| %d | %d | %.0f s | %.0f | %s | %.0f | %.0f | %.0f | %d MiB | %s / %s | %d |\n\n", cp.Target, cp.Held, cp.Seconds, cp.PerSec, cp.StopReason,
			cp.HeapPerLock, cp.RSSPerLock, cp.EtcdDBPerLock, cp.RSSBytes>>20, msf(cp.Latency.P50Ms), msf(cp.Latency.P99Ms), cp.Errors)
		img("capacity-memory.svg")
		notes(&b, cp.Notes)
		if len(cp.ErrorSample) > 0 {
			p("First errors: %s\n\n", strings.Join(quoteAll(cp.ErrorSample), "; "))
		}
	}
	if pn := r.Pinned; pn != nil {
		pinnedSection(&b, pn, r.PinnedRatios)
		collect(systems, pn.Runs)
	}
	if len(r.Layers) > 0 {
		p("## CPU by layer\n\n")
		layersSection(&b, r)
	}
	if len(systems) > 0 {
		p("## Systems\n\n")
		for _, name := range order(systems) {
			p("- **%s**: %s\n", name, systems[name])
		}
		p("\n")
		if _, ok := systems[scenario.RedsyncAlways]; ok {
			p("%s\n\n", redisCaveat)
		} else if _, ok := systems[scenario.RedsyncEverysec]; ok {
			p("%s\n\n", redisCaveat)
		}
	}
	if errs := errorLines(r); len(errs) > 0 {
		p("## Errors seen\n\n")
		for _, e := range errs {
			p("- %s\n", e)
		}
		p("\n")
	}
	if len(r.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	return b.Bytes()
}

func runTable(b *bytes.Buffer, runs []scenario.Run, unit string) {
	fmt.Fprintf(b, "| system | %s | p50 | p90 | p99 | p99.9 | max | CPU µs/op | etcd writes/op | keepalives/op | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n", unit)
	for _, x := range runs {
		l := x.Latency
		fmt.Fprintf(b, "| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", x.System, x.PerSec,
			msf(l.P50Ms), msf(l.P90Ms), msf(l.P99Ms), msf(l.P999Ms), msf(l.MaxMs), cpuText(x.CPUPerOpUs), perOp(x.EtcdWritesPerOp), perOp(x.KeepalivesPerOp), x.Errors)
	}
	b.WriteString("\n")
}

func perOp(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", *v)
}

func cpuText(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.0f", *v)
}

func msf(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 100:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

func metText(m *bool) string {
	switch {
	case m == nil:
		return "not measured"
	case *m:
		return "**met**"
	}
	return "**not met**"
}

func notes(b *bytes.Buffer, ns []string) {
	for _, n := range ns {
		fmt.Fprintf(b, "- %s\n", n)
	}
	if len(ns) > 0 {
		b.WriteString("\n")
	}
}

func collect(dst map[string]string, runs []scenario.Run) {
	for _, r := range runs {
		dst[r.System] = r.Describe
	}
}

var systemOrder = []string{scenario.Direct, scenario.GatewaySession, scenario.GatewayPerLock, scenario.GatewayREST, scenario.Mutex, scenario.EtcdPut, scenario.RedsyncAlways, scenario.RedsyncEverysec}

func order(m map[string]string) []string {
	var out []string
	for _, n := range systemOrder {
		if _, ok := m[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

func errorLines(r *Results) []string {
	var out []string
	add := func(scn string, run scenario.Run) {
		if run.Errors > 0 {
			out = append(out, fmt.Sprintf("%s, %s (%d workers): %d errors, e.g. %s", scn, run.System, run.Workers, run.Errors, strings.Join(quoteAll(run.ErrorSample), "; ")))
		}
	}
	if u := r.Uncontested; u != nil {
		for _, x := range u.Serial {
			add("uncontested", x)
		}
		for _, x := range u.Concurrent {
			add("uncontested", x)
		}
	}
	if o := r.OpenLoop; o != nil {
		for _, x := range o.Runs {
			add("open loop", x.Run)
		}
	}
	if pn := r.Pinned; pn != nil {
		for _, x := range pn.Runs {
			add("pinned", x)
		}
	}
	if c := r.Contended; c != nil {
		for _, x := range c.Runs {
			add("contended", x.Run)
		}
	}
	return out
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = "`" + strings.ReplaceAll(s, "`", "'") + "`"
	}
	return out
}
