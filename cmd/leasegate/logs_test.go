package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// logLine logs one line at info with a span in its context through the
// logger newLogger makes on w for format.
func logLine(t *testing.T, format string, w io.Writer) {
	t.Helper()
	log, err := newLogger("info", format, w)
	if err != nil {
		t.Fatalf("newLogger(%q): %v", format, err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "hello reader", "shard", "shard-0")
}

const (
	wantTraceID = "01020300000000000000000000000000"
	wantSpanID  = "0405060000000000"
)

// checkText checks that out is a slog text line with logLine's
// attributes and trace ids.
func checkText(t *testing.T, out string) {
	t.Helper()
	for _, w := range []string{"level=INFO", `msg="hello reader"`, "shard=shard-0", "trace_id=" + wantTraceID, "span_id=" + wantSpanID} {
		if !strings.Contains(out, w) {
			t.Errorf("text log line %q lacks %q", out, w)
		}
	}
	if json.Valid([]byte(out)) {
		t.Errorf("text log line %q is JSON", out)
	}
}

// checkJSON checks that out is a JSON object with logLine's attributes
// and trace ids.
func checkJSON(t *testing.T, out string) {
	t.Helper()
	var rec map[string]any
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("JSON log line %q: %v", out, err)
	}
	for k, v := range map[string]string{"level": "INFO", "msg": "hello reader", "shard": "shard-0", "trace_id": wantTraceID, "span_id": wantSpanID} {
		if rec[k] != v {
			t.Errorf("JSON log line %q: %s = %v; want %q", out, k, rec[k], v)
		}
	}
}

// --log-format text and json choose the handler whatever stderr is;
// auto chooses JSON for what is not a terminal: a buffer, a pipe, a
// regular file. Both keep the trace and span ids of the context.
func TestLogFormat(t *testing.T) {
	for _, tc := range []struct {
		format string
		check  func(*testing.T, string)
	}{{"text", checkText}, {"json", checkJSON}, {"auto", checkJSON}} {
		var buf bytes.Buffer
		logLine(t, tc.format, &buf)
		tc.check(t, buf.String())
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	logLine(t, "auto", w)
	w.Close()
	out, _ := io.ReadAll(r)
	r.Close()
	checkJSON(t, string(out))

	path := filepath.Join(t.TempDir(), "log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	logLine(t, "auto", f)
	f.Close()
	out, _ = os.ReadFile(path)
	checkJSON(t, string(out))

	if _, err := newLogger("info", "xml", io.Discard); err == nil || !strings.Contains(err.Error(), `--log-format "xml"`) || !strings.Contains(err.Error(), "text, json or auto") {
		t.Errorf("newLogger with format xml: %v; want a refusal naming --log-format, the value and the formats", err)
	}
}

// The gateway's own lines follow --log-format, from the flag, the
// environment and the config file; the default on what is not a terminal
// is JSON.
func TestGatewayLogFormat(t *testing.T) {
	file := filepath.Join(t.TempDir(), "leasegate.yaml")
	if err := os.WriteFile(file, []byte("log-format: text\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  string
		text bool
	}{
		{"default", nil, "", false},
		{"flag text", []string{"--log-format", "text"}, "", true},
		{"flag json", []string{"--log-format", "json"}, "", false},
		{"environment", nil, "text", true},
		{"config file", []string{"--config", file}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("LEASEGATE_LOG_FORMAT", tc.env)
			}
			args := append([]string{"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"), "--shards", "1"}, tc.args...)
			b := serveInBackground(t, args...)
			b.serving(t)
			if err := b.stop(t); err != nil {
				t.Fatal(err)
			}
			var line string
			for _, l := range strings.Split(b.logs.String(), "\n") {
				if strings.Contains(l, "leasegate serving") {
					line = l
				}
			}
			if text := strings.Contains(line, `msg="leasegate serving"`); text != tc.text || json.Valid([]byte(line)) == tc.text {
				t.Errorf("serving line %q: text %v; want text %v", line, text, tc.text)
			}
		})
	}
}
