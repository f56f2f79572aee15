package server_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/leasegate/leasegate/internal/telemetry"
)

// TestLatencyExemplars checks that with tracing on, the OpenMetrics
// exposition of /metrics carries trace ids on the latency histograms'
// buckets: what Grafana's exemplars link to Tempo with.
func TestLatencyExemplars(t *testing.T) {
	t.Parallel()
	p, err := telemetry.New(context.Background(), telemetry.Config{Version: "v0.0.0-test", Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	tp := sdktrace.NewTracerProvider() // samples every request
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p.TracerProvider = tp
	srv := startGateway(t, p, workloadConfig)
	runWorkload(t, srv)

	req, err := http.NewRequest(http.MethodGet, srv.URL()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("GET /metrics with Accept OpenMetrics: Content-Type %q", ct)
	}
	exemplar := regexp.MustCompile(`(?m)^(leasegate_[a-z_]+_seconds)_bucket\{.*\} \d+ # \{[^}]*trace_id="[0-9a-f]{32}"`)
	seen := map[string]bool{}
	for _, m := range exemplar.FindAllStringSubmatch(string(body), -1) {
		seen[m[1]] = true
	}
	for _, h := range []string{"leasegate_acquire_duration_seconds", "leasegate_release_duration_seconds", "leasegate_handoff_duration_seconds"} {
		if !seen[h] {
			t.Errorf("%s buckets carry no trace_id exemplar; exemplars on %v", h, seen)
		}
	}
}

var updateMetricsList = flag.Bool("update", false, "rewrite "+metricsListPath)

// metricsListPath is the list of the leasegate metrics a gateway exports
// after runWorkload. The deploy tests hold the dashboards and the alert
// rules to it without starting a gateway of their own.
const metricsListPath = "../../deploy/observability/exported-metrics.txt"

// TestExportedMetricsList checks the committed list against a live scrape:
// `go test ./internal/server -run TestExportedMetricsList -update` rewrites
// it after a metric is added, renamed or removed.
func TestExportedMetricsList(t *testing.T) {
	t.Parallel()
	srv := metricsGateway(t)
	runWorkload(t, srv)
	var lines []string
	for name, f := range scrape(t, srv.URL()) {
		if strings.HasPrefix(name, "leasegate_") {
			lines = append(lines, fmt.Sprintf("%s %s", name, strings.ToLower(f.GetType().String())))
		}
	}
	sort.Strings(lines)
	want := "# The leasegate metrics a gateway exports (name and type), as\n" +
		"# internal/server's TestExportedMetricsList scrapes them after a small\n" +
		"# workload; generated: go test ./internal/server -run TestExportedMetricsList -update\n" +
		strings.Join(lines, "\n") + "\n"
	path := filepath.FromSlash(metricsListPath)
	if *updateMetricsList {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is out of date; run go test ./internal/server -run TestExportedMetricsList -update\n got:\n%s\nwant:\n%s", metricsListPath, got, want)
	}
}
