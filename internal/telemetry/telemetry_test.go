package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestTracingWanted(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false},
	} {
		getenv := func(k string) string { return tc.env[k] }
		if got := tracingWanted(getenv); got != tc.want {
			t.Errorf("tracingWanted(%v) = %v; want %v", tc.env, got, tc.want)
		}
	}
}

func TestMetricsPushWanted(t *testing.T) {
	for v, want := range map[string]bool{"": false, "none": false, "prometheus": false, "otlp": true, "console": true} {
		if got := metricsPushWanted(func(string) string { return v }); got != want {
			t.Errorf("metricsPushWanted(OTEL_METRICS_EXPORTER=%q) = %v; want %v", v, got, want)
		}
	}
}

func TestNewOffByDefault(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_METRICS_EXPORTER", "")
	p, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p.TracerProvider != nil || p.MeterProvider != nil || p.Metrics != nil || p.Propagator == nil {
		t.Errorf("New with nothing configured = %+v; want only a propagator", p)
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	p, err = New(context.Background(), Config{Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.MeterProvider != nil || p.Metrics != nil {
		t.Errorf("OTEL_SDK_DISABLED=true left metrics on")
	}
}

func TestTraceHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewTraceHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "op")
	log.InfoContext(ctx, "in a request")
	span.End()
	log.Info("outside")
	var lines []map[string]any
	for _, b := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if lines[0]["trace_id"] != span.SpanContext().TraceID().String() || lines[0]["span_id"] != span.SpanContext().SpanID().String() || lines[0]["component"] != "test" {
		t.Errorf("request line %v; want the span's trace_id and span_id and the logger's attributes", lines[0])
	}
	if _, ok := lines[1]["trace_id"]; ok {
		t.Errorf("line without a span %v has a trace_id", lines[1])
	}
}
