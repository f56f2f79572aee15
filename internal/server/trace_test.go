package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
)

// lockedBuffer is a bytes.Buffer safe for the server's concurrent logging.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// spanTree indexes exported spans.
type spanTree struct {
	spans []tracetest.SpanStub
	byID  map[trace.SpanID]tracetest.SpanStub
}

func newSpanTree(spans []tracetest.SpanStub) spanTree {
	t := spanTree{spans: spans, byID: map[trace.SpanID]tracetest.SpanStub{}}
	for _, s := range spans {
		t.byID[s.SpanContext.SpanID()] = s
	}
	return t
}

// named returns the spans called name.
func (t spanTree) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range t.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// child returns the one child of parent called name (a prefix match when
// name ends in "*").
func (t spanTree) child(tb testing.TB, parent tracetest.SpanStub, name string) tracetest.SpanStub {
	tb.Helper()
	var found []tracetest.SpanStub
	for _, s := range t.spans {
		if s.Parent.SpanID() != parent.SpanContext.SpanID() || s.SpanContext.TraceID() != parent.SpanContext.TraceID() {
			continue
		}
		if s.Name == name || strings.HasSuffix(name, "*") && strings.HasPrefix(s.Name, strings.TrimSuffix(name, "*")) {
			found = append(found, s)
		}
	}
	if len(found) == 0 {
		tb.Fatalf("span %q has no child %q; it has %v", parent.Name, name, t.childNames(parent))
	}
	return found[0]
}

func (t spanTree) childNames(parent tracetest.SpanStub) []string {
	var out []string
	for _, s := range t.spans {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() {
			out = append(out, s.Name)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestTraceOfAWaitedAcquire follows one streaming acquire that queues
// behind a holder and is granted when the holder releases: the client's
// span continues in the gateway, the engine's spans nest below with etcd
// calls as their children, the wait reports its queue position, and the
// grant links to the holder's release.
func TestTraceOfAWaitedAcquire(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var logs lockedBuffer
	srv := startGateway(t, &telemetry.Providers{TracerProvider: tp, Propagator: telemetry.Propagator()}, func(c *server.Config) {
		c.Log = slog.New(telemetry.NewTraceHandler(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
		// No lease pool: the waiter's enqueue grants its lease on its own
		// path, the call this test finds under its span. With a pool it
		// would take one or not depending on whether the pass the holder's
		// acquire started had ended.
		c.Fleet.Queue.LeasePool = 0
	})
	c, err := client.New([]string{srv.URL()}, client.WithTracing(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	app := tp.Tracer("test")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	hctx, hspan := app.Start(ctx, "holder acquires")
	holder, err := c.Acquire(hctx, "orders/42", client.WithTTL(10*time.Second))
	hspan.End()
	if err != nil {
		t.Fatal(err)
	}

	queued := make(chan int64, 8)
	type result struct {
		l   *client.Lock
		err error
	}
	done := make(chan result, 1)
	wctx, wspan := app.Start(ctx, "waiter acquires")
	go func() {
		l, err := c.Acquire(wctx, "orders/42", client.WithTTL(10*time.Second), client.WithOnQueued(func(p int64) {
			select {
			case queued <- p:
			default:
			}
		}))
		done <- result{l, err}
	}()
	select {
	case p := <-queued:
		if p != 1 {
			t.Errorf("queue position %d; want 1", p)
		}
	case <-ctx.Done():
		t.Fatal("the waiter was never queued")
	}
	rctx, rspan := app.Start(ctx, "holder releases")
	if err := holder.Release(rctx); err != nil {
		t.Fatal(err)
	}
	rspan.End()
	r := <-done
	wspan.End()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	tree := newSpanTree(exp.GetSpans())
	root := tree.named("waiter acquires")[0]
	cli := tree.child(t, root, "leasegate.v1.LockService/Acquire")
	if cli.SpanKind != trace.SpanKindClient {
		t.Errorf("SDK span kind %v; want client", cli.SpanKind)
	}
	// The gateway continued the SDK's trace: its server span is the
	// client span's child, in the same trace.
	srvSpan := tree.child(t, cli, "leasegate.v1.LockService/Acquire")
	if srvSpan.SpanKind != trace.SpanKindServer {
		t.Errorf("gateway span kind %v; want server", srvSpan.SpanKind)
	}
	route := tree.child(t, srvSpan, "leasegate.route")
	if v, _ := attr(route, "leasegate.shard"); v.AsString() != "main" {
		t.Errorf("route span shard %q; want main", v.AsString())
	}
	enq := tree.child(t, srvSpan, "leasegate.enqueue")
	tree.child(t, enq, "etcdserverpb.KV/Txn")
	tree.child(t, enq, "etcdserverpb.Lease/LeaseGrant")
	if v, _ := attr(enq, "leasegate.outcome"); v.AsString() != "enqueued" {
		t.Errorf("enqueue outcome %q; want enqueued", v.AsString())
	}
	wait := tree.child(t, srvSpan, "leasegate.wait")
	tree.child(t, wait, "etcdserverpb.KV/Txn") // the waiter's re-reads
	var sawPosition, sawLeft bool
	for _, ev := range wait.Events {
		switch ev.Name {
		case "queue.position":
			for _, kv := range ev.Attributes {
				if kv.Key == "leasegate.queue.position" && kv.Value.AsInt64() == 1 {
					sawPosition = true
				}
			}
		case "predecessor.left":
			sawLeft = true
		}
	}
	if !sawPosition || !sawLeft {
		t.Errorf("wait span events %v; want queue.position 1 and predecessor.left", wait.Events)
	}
	grant := tree.child(t, wait, "leasegate.grant")
	if v, _ := attr(grant, "leasegate.fencing_token"); v.AsInt64() != r.l.Token() {
		t.Errorf("grant span token %d; want %d", v.AsInt64(), r.l.Token())
	}

	// The grant links to the holder's release, in the holder's trace.
	relRoot := tree.named("holder releases")[0]
	relCli := tree.child(t, relRoot, "leasegate.v1.LockService/Release")
	rel := tree.child(t, tree.child(t, relCli, "leasegate.v1.LockService/Release"), "leasegate.release")
	if len(grant.Links) != 1 || grant.Links[0].SpanContext.SpanID() != rel.SpanContext.SpanID() ||
		grant.Links[0].SpanContext.TraceID() != rel.SpanContext.TraceID() {
		t.Errorf("grant links %v; want one link to the release span %v", grant.Links, rel.SpanContext)
	}

	// The request-scoped log lines carry the trace and span ids; no line
	// carries a lock id.
	var sawWaiterLine bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "call" && rec["procedure"] == "/leasegate.v1.LockService/Acquire" && rec["trace_id"] == srvSpan.SpanContext.TraceID().String() {
			sawWaiterLine = rec["span_id"] == srvSpan.SpanContext.SpanID().String()
		}
		for _, id := range []string{holder.ID(), r.l.ID()} {
			if strings.Contains(line, id) {
				t.Errorf("log line carries a lock id: %s", line)
			}
		}
	}
	if !sawWaiterLine {
		t.Errorf("no call log line with the waiter's trace and span ids in:\n%s", logs.String())
	}

	// No span carries a lock id (it holds the owner's secret).
	for _, s := range tree.spans {
		for _, kv := range s.Attributes {
			v := kv.Value.Emit()
			for _, id := range []string{holder.ID(), r.l.ID()} {
				if strings.Contains(v, id) {
					t.Errorf("span %q attribute %s carries a lock id", s.Name, kv.Key)
				}
			}
		}
	}
}
