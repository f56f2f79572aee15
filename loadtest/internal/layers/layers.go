// Package layers attributes the samples of a CPU profile (or any profile
// with stacks) to the layers a lock cycle crosses: the load generator, the
// Go SDK, HTTP/2 and Connect, the gateway's own logic, the etcd client, the
// etcd server, and the Go runtime (garbage collection apart from the rest).
//
// A sample belongs to the innermost frame of a package that names a layer:
// library code that every layer uses (the standard library below net/http,
// protobuf, gRPC's framing, logging, metrics) is charged to the layer that
// called it. Garbage collection is charged to GC wherever it runs (an
// allocation's assist included), since no layer's frames say whose garbage
// it is collecting.
package layers

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// The layers, in the order tables list them.
const (
	LoadGen   = "load generator"
	SDK       = "SDK"
	HTTP      = "HTTP/2 + Connect"
	HTTPCli   = "HTTP client"
	Gateway   = "gateway logic"
	EtcdCli   = "etcd client"
	EtcdSrv   = "etcd server"
	Redis     = "Redis client"
	GC        = "runtime GC"
	Runtime   = "runtime other"
	Unclaimed = "other"
)

// Order lists every layer in table order.
var Order = []string{LoadGen, SDK, HTTPCli, HTTP, Gateway, EtcdCli, EtcdSrv, Redis, GC, Runtime, Unclaimed}

const module = "github.com/leasegate/leasegate/"

// owners maps function-name prefixes to layers, most specific first.
var owners = []struct{ prefix, layer string }{
	{module + "loadtest", LoadGen},
	{module + "client", SDK},
	{module + "internal/embedetcd", EtcdSrv},
	{module + "internal/etcdtest", EtcdSrv},
	{module + "proto", ""}, // generated messages and stubs: the caller's
	{module, Gateway},      // gateway, locks, shard, queue, internal/server …
	{"connectrpc.com/", HTTP},
	{"golang.org/x/net/http2", HTTP},
	{"net/http", HTTP},
	{"go.etcd.io/etcd/client/", EtcdCli},
	{"go.etcd.io/etcd/server/", EtcdSrv},
	{"go.etcd.io/etcd/pkg/", EtcdSrv},
	{"go.etcd.io/raft", EtcdSrv},
	{"go.etcd.io/bbolt", EtcdSrv},
	{"github.com/redis/", Redis},
	{"github.com/go-redsync/", Redis},
}

// gcFrames mark a sample as garbage collection wherever they appear.
var gcFrames = []string{
	"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge",
	"runtime.gcDrain", "runtime.markroot", "runtime.gcStart", "runtime.gcMarkTermination",
}

// Classify returns the layer of one stack, given innermost frame first as
// function names.
func Classify(stack []string) string {
	grpc := false
	for _, f := range stack {
		for _, g := range gcFrames {
			if strings.HasPrefix(f, g) {
				return GC
			}
		}
		grpc = grpc || strings.HasPrefix(f, "google.golang.org/grpc")
	}
	allRuntime := true
	for _, f := range stack {
		if !isRuntime(f) {
			allRuntime = false
		}
		if strings.HasPrefix(f, "google.golang.org/grpc") {
			// gRPC carries etcd's traffic both ways; its transport tells
			// which end it is. Other gRPC frames are the caller's.
			switch {
			case strings.Contains(f, "http2Client") || strings.Contains(f, "HTTP2Client") || strings.Contains(f, "clientHeaderHandler") ||
				strings.Contains(f, "grpc.(*ClientConn)") || strings.Contains(f, "grpc.(*clientStream)") || strings.Contains(f, "grpc.(*addrConn)") ||
				strings.Contains(f, "grpc.invoke") || strings.Contains(f, "grpc.newClientStream"):
				return EtcdCli
			case strings.Contains(f, "http2Server") || strings.Contains(f, "ServerTransport") || strings.Contains(f, "serverHeaderHandler") ||
				strings.Contains(f, "grpc.(*Server)") || strings.Contains(f, "grpc.(*serverStream)"):
				return EtcdSrv
			}
			continue
		}
		for _, o := range owners {
			if !strings.HasPrefix(f, o.prefix) {
				continue
			}
			if o.layer == HTTP && grpc {
				break // gRPC's own HTTP/2 framing: the caller's
			}
			if o.layer == HTTP && clientSide(f) {
				return HTTPCli
			}
			if o.layer != "" {
				return o.layer
			}
			break
		}
	}
	if allRuntime {
		return Runtime
	}
	for _, f := range stack {
		if isRuntime(f) || strings.HasPrefix(f, "syscall.") {
			continue
		}
		return Unclaimed
	}
	return Runtime
}

// isRuntime reports whether f is the runtime's: its packages, or an
// assembly routine (no package path at all, as indexbytebody).
func isRuntime(f string) bool {
	return strings.HasPrefix(f, "runtime.") || strings.HasPrefix(f, "internal/runtime") || !strings.Contains(f, ".")
}

// clientSide reports whether an HTTP, HTTP/2 or Connect frame is a
// client's (the SDK's transport, the REST client's) rather than the
// gateway's server.
func clientSide(f string) bool {
	l := strings.ToLower(f)
	return strings.Contains(l, "client") || strings.Contains(l, "transport") || strings.Contains(l, "persistconn") ||
		strings.Contains(l, "duplexhttpcall") || strings.HasPrefix(l, "net/http.send") || strings.HasPrefix(l, "net/http.(*request)")
}

// Breakdown sums a profile's samples by layer, in the profile's last
// sample value (nanoseconds of CPU for a CPU profile, bytes in use for a
// heap profile's inuse_space).
func Breakdown(p *profile.Profile) map[string]int64 {
	out := map[string]int64{}
	idx := len(p.SampleType) - 1
	var stack []string
	for _, s := range p.Sample {
		stack = stack[:0]
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				if ln.Function != nil {
					stack = append(stack, ln.Function.Name)
				}
			}
		}
		out[Classify(stack)] += s.Value[idx]
	}
	return out
}

// Row is one profiled phase: CPU per operation, by layer.
type Row struct {
	Label string `json:"label"`
	// Ops is the operations completed while the profile ran.
	Ops int64 `json:"ops"`
	// Seconds is the wall time profiled.
	Seconds float64 `json:"seconds"`
	// UsPerOp maps a layer to µs of CPU per operation.
	UsPerOp map[string]float64 `json:"us_per_op"`
	// TotalUs is the sum over layers.
	TotalUs float64 `json:"total_us_per_op"`
	// File is the merged profile, when written.
	File string `json:"file,omitempty"`
}

// RowOf turns a CPU profile of ops operations into a Row.
func RowOf(label string, p *profile.Profile, ops int64, seconds float64) Row {
	r := Row{Label: label, Ops: ops, Seconds: seconds, UsPerOp: map[string]float64{}}
	if ops <= 0 {
		return r
	}
	for l, ns := range Breakdown(p) {
		v := float64(ns) / 1e3 / float64(ops)
		r.UsPerOp[l] = v
		r.TotalUs += v
	}
	return r
}

// Table writes rows as a Markdown table with a column per layer that any
// row uses.
func Table(w io.Writer, rows []Row, unit string) {
	var cols []string
	for _, l := range Order {
		if slices.ContainsFunc(rows, func(r Row) bool { return r.UsPerOp[l] > 0 }) {
			cols = append(cols, l)
		}
	}
	fmt.Fprintf(w, "| phase | %s | %s | total |\n|---|", unit, strings.Join(cols, " | "))
	fmt.Fprint(w, strings.Repeat("---|", len(cols)+2), "\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d |", r.Label, r.Ops)
		for _, c := range cols {
			fmt.Fprintf(w, " %.0f |", r.UsPerOp[c])
		}
		fmt.Fprintf(w, " %.0f |\n", r.TotalUs)
	}
}

// The sides of a cycle: what runs on the users' machines, in a gateway
// process, and in etcd.
const (
	SideClient  = "client"
	SideGateway = "gateway"
	SideEtcd    = "etcd"
)

// sideOf maps the layers that belong to one process to their side.
var sideOf = map[string]string{
	LoadGen: SideClient, SDK: SideClient, HTTPCli: SideClient, Redis: SideClient,
	HTTP: SideGateway, Gateway: SideGateway, EtcdCli: SideGateway,
	EtcdSrv: SideEtcd,
}

// Sides folds a row into client, gateway and etcd µs per operation, the
// runtime's layers (GC, scheduler, unclaimed) shared out in proportion to
// each side's own CPU: the per-unit costs of docs/capacity.md. The etcd
// client counts as the gateway's, as it runs in the gateway's process for
// every gateway system (for the direct and Mutex baselines it is the
// client's own).
func Sides(r Row) map[string]float64 {
	own := map[string]float64{}
	var sum, shared float64
	for l, v := range r.UsPerOp {
		if s, ok := sideOf[l]; ok {
			own[s] += v
			sum += v
		} else {
			shared += v
		}
	}
	out := map[string]float64{}
	for _, s := range []string{SideClient, SideGateway, SideEtcd} {
		out[s] = own[s]
		if sum > 0 {
			out[s] += shared * own[s] / sum
		}
	}
	return out
}

// SidesTable writes rows folded by Sides as a Markdown table.
func SidesTable(w io.Writer, rows []Row) {
	fmt.Fprint(w, "| phase | client | gateway | etcd | total |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		s := Sides(r)
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f | %.0f |\n", r.Label, s[SideClient], s[SideGateway], s[SideEtcd], r.TotalUs)
	}
}
