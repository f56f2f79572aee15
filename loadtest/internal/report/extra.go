package report

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/leasegate/leasegate/loadtest/internal/layers"
	"github.com/leasegate/leasegate/loadtest/internal/scenario"
)

const layersIntro = "CPU per operation by layer, from a CPU profile of each measured window (after its warmup; every round of a phase merged). " +
	"The profile covers the whole process — load generator, gateway and the embedded etcd members — so each row is everything that system's load cost. " +
	"A sample is charged to the innermost frame of a package that names a layer: the load generator (`loadtest/…`), the SDK (`client`), " +
	"the HTTP client under the SDK or the REST client (`net/http`, HTTP/2 and Connect frames of a client, a transport or a connection pool), " +
	"HTTP/2 + Connect on the gateway's side (the other `net/http`, `golang.org/x/net/http2` and `connectrpc.com` frames), the gateway's logic (the module's other packages: `gateway`, `locks`, `shard`, `queue`, `internal/server` …), " +
	"the etcd client (`go.etcd.io/etcd/client`, and gRPC's client transport), the etcd server (`go.etcd.io/etcd/server`, `raft`, `bbolt`, `etcd/pkg`, gRPC's server transport); " +
	"library code below them (crypto, JSON, protobuf, syscalls) is charged to its caller. *runtime GC* is every sample under the collector's workers or an allocation's assist; " +
	"*runtime other* is the scheduler and stacks with no other frame; *other* is code no rule claims. The profiler samples at 100 Hz: a row of a few hundred samples is good to about 10 %. " +
	"Renewal rows are per keepalive etcd counted; open-loop and uncontested rows per cycle; contended rows per grant; handoff rows per handoff (or Put)."

// LayersMarkdown renders the CPU-by-layer table on its own (layers.md).
func LayersMarkdown(r *Results) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# CPU by layer, %s\n\nCommand: `%s`\n\n", r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Command)
	layersSection(&b, r)
	return b.Bytes()
}

func layersSection(b *bytes.Buffer, r *Results) {
	fmt.Fprintf(b, "%s\n\n", layersIntro)
	layers.Table(b, r.Layers, "ops")
	b.WriteString("\nThe same by side — *client* (load generator, SDK, its HTTP client), *gateway* (HTTP/2 + Connect, the gateway's logic, the etcd client) and *etcd* (the etcd server), " +
		"the runtime's CPU shared out in proportion to each side's own (docs/capacity.md takes its per-unit costs from here; for the direct and Mutex baselines the etcd client is the client's):\n\n")
	layers.SidesTable(b, r.Layers)
	b.WriteString("\nµs of CPU per operation. Profiles: ")
	var files []string
	for _, f := range r.ProfileFiles {
		files = append(files, "`"+f+"`")
	}
	b.WriteString(strings.Join(files, ", "))
	b.WriteString(" (`go tool pprof -top FILE` for the functions).\n\n")
}

// figuresSection renders the performance work's figures.
func figuresSection(b *bytes.Buffer, r *Results) {
	if len(r.Figures) == 0 {
		return
	}
	b.WriteString("## Performance figures (ratios measured side by side in this run)\n\n| figure | measured | from |\n|---|---|---|\n")
	for _, f := range r.Figures {
		fmt.Fprintf(b, "| %s | %s | %s |\n", f.Name, f.Shown, f.Detail)
	}
	b.WriteString("\n")
}

// contendedExtra renders the delayed handoff, the drain and the waiter
// memory.
func contendedExtra(b *bytes.Buffer, c *scenario.Contended) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if d := c.Delayed; d != nil {
		p("### Handoff after a settled enqueue\n\nOne holder and one waiter per system on one name: the holder releases %.0f ms after the waiter's place in line was confirmed "+
			"(the gateway's Queued message; Mutex's enqueue transaction), so the waiter is settled in line. The figure runs from the release being sent to the waiter's grant received. "+
			"*etcd-put*, in the same interleaved rounds, is one Put on the same cluster: the least a handoff that needs one write can take.\n\n", d.DelayMs)
		runTable(b, d.Runs, "per s")
		notes(b, d.Notes)
	}
	if d := c.Drain; d != nil {
		p("### Drain of a long queue\n\n%d waiters (a session each; the gateway's through streaming Acquires) queue behind a holder on one name; when every place is confirmed the holder releases, "+
			"and each waiter releases as soon as it is granted. The time runs from the holder's release to the last waiter's release; systems take turns.\n\n", d.Waiters)
		p("| system | drains | median | per handoff | each (s) | errors |\n|---|---|---|---|---|---|\n")
		for _, x := range d.Runs {
			var each []string
			for _, s := range x.Seconds {
				each = append(each, fmt.Sprintf("%.2f", s))
			}
			p("| %s | %d | %.2f s | %.2f ms | %s | %d |\n", x.System, len(x.Seconds), x.MedianS, x.PerHandoffMs, strings.Join(each, ", "), x.Errors)
		}
		p("\n")
		notes(b, d.Notes)
		for _, x := range d.Runs {
			if len(x.ErrorSample) > 0 {
				p("- %s errors: %s\n", x.System, strings.Join(quoteAll(x.ErrorSample), "; "))
			}
		}
	}
	if m := c.WaiterMemory; m != nil {
		p("### Gateway memory per queued waiter\n\n%s\n\n", m.Method)
		if len(m.Runs) > 0 {
			p("| connections | waiters | heap B | stacks B | KiB per waiter | gateway KiB | goroutines | RSS KiB | heap by layer (B) | goroutines by layer |\n|---|---|---|---|---|---|---|---|---|---|\n")
			for _, x := range m.Runs {
				if x.Error != "" {
					p("| %s | %d | failed: %s |||||||\n", x.Connections, x.Waiters, x.Error)
					continue
				}
				p("| %s | %d | %.0f | %.0f | %.1f | %.1f | %.2f | %.1f | %s | %s |\n", x.Connections, x.Waiters, x.HeapB, x.StackB, x.TotalKiB, x.GatewayKiB, x.Goroutines, x.RSSKiB,
					byLayer(x.HeapByLayerB, "%.0f"), byLayer(x.GoroutinesByLayer, "%.2f"))
			}
			p("\n")
		}
		notes(b, m.Notes)
	}
}

func byLayer(m map[string]float64, format string) string {
	var parts []string
	for _, l := range layers.Order {
		if v, ok := m[l]; ok {
			parts = append(parts, l+" "+fmt.Sprintf(format, v))
		}
	}
	return strings.Join(parts, "; ")
}

// mixedSection renders the mixed load: held locks renewing with cycles on
// top.
func mixedSection(b *bytes.Buffer, m *scenario.Mixed) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Mixed load (the capacity model's check)\n\nK locks held and renewing, and acquire+release cycles offered at a fixed rate on top, by the same mode, on names spread over every cluster. " +
		"*Held only* is the window before the cycles start. CPU is this process's (load generator, gateway and etcd); writes are raft entries and keepalives etcd's lease renewals, over every cluster.\n\n")
	p("| mode | locks | TTL | cycles/s offered / done | p50 / p99 | CPU s/s held only / with cycles | etcd writes/s held only / with cycles | keepalives/s held only / with cycles | lost | errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range m.Runs {
		c := x.Cycles
		p("| %s | %d | %.0f s | %.0f / %.0f | %s / %s | %.3f / %.3f | %.0f / %.0f | %.0f / %.0f | %d | %d |\n", x.Mode, x.Locks, x.TTLs, c.Rate, c.PerSec,
			msf(c.Latency.P50Ms), msf(c.Latency.P99Ms), x.IdleCPUPerSec, x.CPUPerSec, x.IdleWritesPerSec, x.WritesPerSec, x.IdleKeepalives, x.KeepalivesPerSec, x.Lost, x.Errors)
	}
	p("\n")
	notes(b, m.Notes)
}
