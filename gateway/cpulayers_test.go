package gateway_test

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/pprof/profile"
)

// A CPU sample belongs to the layer of the innermost frame on its stack
// that some layer owns: a protobuf marshal belongs to whoever called it,
// an allocation to the code that allocated. Frames of the runtime and of
// shared libraries (protobuf, JSON, crypto, sync) own nothing, so a stack
// of only those — the garbage collector's workers, the scheduler — is
// "runtime". (Prometheus's client belongs to whoever calls it: the
// gateway's metrics go through OpenTelemetry, etcd's own are etcd's.)
type layer struct {
	name string
	owns func(fn, stack string) bool
}

func prefixed(prefixes ...string) func(fn, stack string) bool {
	return func(fn, _ string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(fn, p) {
				return true
			}
		}
		return false
	}
}

// httpServer reports whether an HTTP or Connect frame's stack is the
// gateway's (else the caller's).
func httpServer(stack string) bool {
	for _, s := range []string{"http2serverConn", "(*conn).serve", "connect.(*Handler)"} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

// grpcServer reports whether a gRPC frame's stack is etcd's server (else
// the gateway's etcd client).
func grpcServer(stack string) bool {
	for _, s := range []string{"transport.(*http2Server)", "transport.NewServerTransport", "grpc.(*Server)", "grpc.(*serverStream)", "go.etcd.io/etcd/server/"} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

// grpcFrame reports whether fn is gRPC's, or the HTTP/2 framing gRPC uses
// (golang.org/x/net/http2; net/http bundles its own).
func grpcFrame(fn, stack string) bool {
	return strings.HasPrefix(fn, "google.golang.org/grpc") ||
		(strings.HasPrefix(fn, "golang.org/x/net/http2") && strings.Contains(stack, "google.golang.org/grpc"))
}

const lg = "github.com/leasegate/leasegate/"

var layers = []layer{
	{"benchmark driver", prefixed(lg + "gateway_test.")},
	{"SDK (client)", prefixed(lg + "client.")},
	{"gateway telemetry (otel, metrics)", prefixed("go.opentelemetry.io/", "connectrpc.com/otelconnect", "github.com/felixge/httpsnoop",
		lg+"gateway.(*telemetry)", lg+"gateway.(*callRecorder)", lg+"gateway.(*acquireConn)", lg+"gateway.(*callRecord)",
		lg+"gateway.withRecord", lg+"gateway.recordOf", lg+"gateway.outcomeOf", lg+"gateway.lossReason")},
	{"gateway id HMAC", prefixed(lg+"gateway.EncodeLockID", lg+"gateway.DecodeLockID", lg+"gateway.DecodeSessionID", lg+"gateway.EncodeSessionID",
		lg+"gateway.(*IDKeys)", lg+"gateway.seal", lg+"gateway.tag", lg+"gateway.open", lg+"gateway.(*reader)", lg+"gateway.appendString")},
	{"gateway REST JSON", prefixed(lg+"gateway.decodeStrict", lg+"gateway.writeJSON", lg+"gateway.(*Service).restPost", lg+"gateway.(*Service).rest")},
	{"gateway edge (auth, CORS, deadlines)", prefixed(lg+"gateway.(*Service).edge", lg+"gateway.(*Authenticator)", lg+"gateway.checkEncodings",
		lg+"gateway.isPublic", lg+"gateway.(*deadlineBody)", lg+"gateway.(*flushWriter)", lg+"gateway.loopbackHost", "github.com/rs/cors")},
	{"gateway logic (validation, routing, limits)", prefixed(lg + "gateway.")},
	{"engine (queue, locks, shard, breaker)", prefixed(lg+"queue.", lg+"locks.", lg+"shard.", "github.com/sony/gobreaker")},
	{"etcd server", func(fn, stack string) bool {
		return strings.HasPrefix(fn, "go.etcd.io/etcd/server/") || strings.HasPrefix(fn, "go.etcd.io/raft/") ||
			strings.HasPrefix(fn, "go.etcd.io/bbolt") || (grpcFrame(fn, stack) && grpcServer(stack))
	}},
	{"etcd client", func(fn, stack string) bool {
		return strings.HasPrefix(fn, "go.etcd.io/etcd/client/") || grpcFrame(fn, stack)
	}},
	{"HTTP + Connect, gateway side", func(fn, stack string) bool {
		return (strings.HasPrefix(fn, "net/http.") || strings.HasPrefix(fn, "connectrpc.com/connect")) && httpServer(stack)
	}},
	{"HTTP + Connect, caller side", prefixed("net/http.", "connectrpc.com/connect")},
}

// cpuTable tabulates a CPU profile by layer, per cycle, scaled so the total
// is the process's measured CPU (cpu).
func cpuTable(by []layer, r io.Reader, cpu time.Duration, cycles int) (string, error) {
	p, err := profile.Parse(r)
	if err != nil {
		return "", err
	}
	idx := len(p.SampleType) - 1 // cpu nanoseconds
	var total int64
	for _, s := range p.Sample {
		total += s.Value[idx]
	}
	if total == 0 {
		return "", fmt.Errorf("the profile holds no samples")
	}
	scale := float64(cpu.Nanoseconds()) / float64(total) / float64(cycles) / 1e3
	return layerTable(by, p, idx, scale, "µs/cycle", "%.0f"), nil
}

// allocTable tabulates the allocations made between two allocs profiles by
// layer, per cycle.
func allocTable(by []layer, before, after io.Reader, cycles int) (string, error) {
	b, err := profile.Parse(before)
	if err != nil {
		return "", err
	}
	a, err := profile.Parse(after)
	if err != nil {
		return "", err
	}
	b.Scale(-1)
	d, err := profile.Merge([]*profile.Profile{a, b})
	if err != nil {
		return "", err
	}
	idx := slices.IndexFunc(d.SampleType, func(t *profile.ValueType) bool { return t.Type == "alloc_objects" })
	if idx < 0 {
		return "", fmt.Errorf("the allocs profile has no alloc_objects")
	}
	return layerTable(by, d, idx, 1/float64(cycles), "allocs/cycle", "%.1f"), nil
}

// layerTable sums the samples' values at index idx by the layers of by,
// times scale.
func layerTable(by []layer, p *profile.Profile, idx int, scale float64, unit, format string) string {
	sums := map[string]int64{}
	detail := map[string]int64{} // innermost gateway function, for the gateway's own layers
	var total int64
	for _, s := range p.Sample {
		v := s.Value[idx]
		total += v
		var fns []string
		for _, loc := range s.Location {
			for _, ln := range loc.Line { // innermost first
				if ln.Function != nil {
					fns = append(fns, ln.Function.Name)
				}
			}
		}
		stack := strings.Join(fns, "\n")
		name := "runtime (GC, scheduler)"
	find:
		for _, fn := range fns {
			for _, l := range by {
				if l.owns(fn, stack) {
					name = l.name
					if strings.HasPrefix(name, "gateway") {
						detail[strings.TrimPrefix(fn, lg)] += v
					}
					break find
				}
			}
		}
		sums[name] += v
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "layer\t%s\tshare\t\n", unit)
	names := make([]string, 0, len(sums))
	for n := range sums {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(sums[b], sums[a]) })
	share := func(v int64) float64 { return 100 * float64(v) / float64(max(total, 1)) }
	for _, n := range names {
		fmt.Fprintf(tw, "%s\t"+format+"\t%.1f%%\t\n", n, float64(sums[n])*scale, share(sums[n]))
	}
	fmt.Fprintf(tw, "total\t"+format+"\t100%%\t\n", float64(total)*scale)
	tw.Flush()
	sb.WriteString("\ngateway's own functions (innermost), top 12:\n")
	fns := make([]string, 0, len(detail))
	for f := range detail {
		fns = append(fns, f)
	}
	slices.SortFunc(fns, func(a, b string) int { return cmp.Compare(detail[b], detail[a]) })
	for _, f := range fns[:min(12, len(fns))] {
		fmt.Fprintf(&sb, "  "+format+" %s  %s\n", float64(detail[f])*scale, unit, f)
	}
	return sb.String()
}
