package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/telemetry"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    map[string]int    // span name → count
	resource map[string]string // resource attributes of the last batch
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	var msg collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		r.resource = map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			r.resource[kv.Key] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans[s.Name]++
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// TestOTLPExport configures tracing the way an operator does, with
// OTEL_* variables alone, and checks that the spans of an acquire and a
// release reach an OTLP/HTTP receiver by the time Shutdown returns.
func TestOTLPExport(t *testing.T) {
	// Not parallel: it sets OTEL_* environment variables for the process.
	rcv := &otlpReceiver{spans: map[string]int{}}
	hs := httptest.NewServer(rcv)
	defer hs.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", hs.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "leasegate-otlp-test")
	p, err := telemetry.New(context.Background(), telemetry.Config{Version: "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	if p.TracerProvider == nil {
		t.Fatal("OTEL_EXPORTER_OTLP_ENDPOINT set, but tracing is off")
	}
	srv := startGateway(t, p, nil)
	c, err := client.New([]string{srv.URL()}, client.WithTracing(p.TracerProvider))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "otlp/one", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(ctx); err != nil { // flushes the batch
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, name := range []string{
		"leasegate.v1.LockService/Acquire", "leasegate.enqueue", "leasegate.grant",
		"leasegate.v1.LockService/Release", "leasegate.release", "etcdserverpb.KV/Txn",
	} {
		if rcv.spans[name] == 0 {
			t.Errorf("the receiver got no %q span; it got %v", name, rcv.spans)
		}
	}
	if got := rcv.resource["service.name"]; got != "leasegate-otlp-test" {
		t.Errorf("resource service.name %q; want the OTEL_SERVICE_NAME value", got)
	}
	if got := rcv.resource["service.version"]; got != "v1.2.3" {
		t.Errorf("resource service.version %q; want v1.2.3", got)
	}
	if rcv.resource["host.name"] == "" {
		t.Errorf("resource has no host.name: %v", rcv.resource)
	}
}
