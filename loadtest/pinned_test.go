package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/report"
	"github.com/leasegate/leasegate/loadtest/internal/scenario"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
)

// TestPinnedSmoke runs the pinned scenario with tiny counts: etcd in a
// process of its own on one CPU, this test process on another. It checks
// that every system was measured without errors, that each cost etcd CPU
// and raft entries per cycle and this process CPU, that the kernel kept
// both processes on their CPUs and etcd on loopback, and that this
// process gets its affinity back.
func TestPinnedSmoke(t *testing.T) {
	allowed, err := testbed.AllowedCPUs()
	if err != nil {
		t.Skipf("CPU affinity is unavailable here: %v", err)
	}
	if len(allowed) < 2 {
		t.Skipf("the pinned setup needs 2 CPUs; this process may use %d (%s)", len(allowed), allowed)
	}
	before, err := testbed.ThreadCPUs(os.Getpid())
	if err != nil {
		t.Skipf("cannot read thread affinity from /proc: %v", err)
	}
	out := t.TempDir()
	cfg := tiny()
	pin := &testbed.Pin{EtcdCPUs: allowed[:1], GatewayCPUs: allowed[1:2]}
	o := options{scenarios: []string{pinnedScenario}, cfg: cfg, out: out, command: "go test ./loadtest -run Pinned", pin: pin}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := run(ctx, o, testWriter{t}); errors.Is(err, testbed.ErrNoAffinity) {
		t.Skipf("CPU affinity is unavailable here: %v", err)
	} else if err != nil {
		t.Fatalf("run: %v", err)
	}
	if after, err := testbed.ThreadCPUs(os.Getpid()); err != nil || !slices.Equal(after, before) {
		t.Errorf("after the run this process's threads may use CPUs %q (%v); want %q as before", after, err, before)
	}

	var res report.Results
	b, err := os.ReadFile(filepath.Join(out, report.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json does not parse: %v", err)
	}
	pn := res.Pinned
	if pn == nil {
		t.Fatal("no pinned results")
	}
	if want := []string{pin.EtcdCPUs.String()}; !slices.Equal(pn.EtcdThreadCPUs, want) {
		t.Errorf("the etcd process's threads may use CPUs %q; want %q", pn.EtcdThreadCPUs, want)
	}
	if want := []string{pin.GatewayCPUs.String()}; !slices.Equal(pn.GatewayThreadCPUs, want) {
		t.Errorf("the gateway's threads may use CPUs %q; want %q", pn.GatewayThreadCPUs, want)
	}
	if len(pn.EtcdListens) < 2 { // the client and the peer listener
		t.Errorf("the etcd process listens on %q; want its client and peer listeners", pn.EtcdListens)
	}
	for _, a := range pn.EtcdListens {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Errorf("the etcd process listens on %s; want 127.0.0.1 only", a)
		}
	}
	want := []string{scenario.GatewayREST, scenario.GatewaySession, scenario.GatewayPerLock, scenario.Mutex, scenario.Direct}
	checkRuns(t, "pinned", pn.Runs, want)
	for _, r := range pn.Runs {
		if r.Workers != cfg.Workers || r.Errors != 0 {
			t.Errorf("pinned %s: %d workers, %d errors %v; want %d, none", r.System, r.Workers, r.Errors, r.ErrorSample, cfg.Workers)
		}
		for _, f := range []struct {
			name     string
			v        *float64
			min, max float64
		}{
			// Every cycle writes at least its acquire and its release.
			{"raft entries per cycle", r.EtcdWritesPerOp, 1.5, 8},
			{"etcd CPU µs per cycle", r.EtcdCPUPerOpUs, 1e-9, 1e6},
			{"gateway + load CPU µs per cycle", r.CPUPerOpUs, 1e-9, 1e6},
		} {
			if f.v == nil || *f.v < f.min || *f.v > f.max {
				t.Errorf("pinned %s: %s = %v; want within [%g, %g]", r.System, f.name, deref(f.v), f.min, f.max)
			}
		}
	}
	if len(res.PinnedRatios) != len(want)-1 {
		t.Errorf("got %d ratios to Mutex; want %d: %+v", len(res.PinnedRatios), len(want)-1, res.PinnedRatios)
	}
	for _, x := range res.PinnedRatios {
		for name, v := range map[string]*float64{"cycles/s": x.PerSec, "etcd CPU": x.EtcdCPU, "raft entries": x.EtcdWrites} {
			if v == nil || *v <= 0 {
				t.Errorf("%s ÷ mutex, %s = %v; want a positive ratio", x.System, name, deref(v))
			}
		}
	}
	md, err := os.ReadFile(filepath.Join(out, report.MarkdownFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Pinned: etcd on CPUs of its own") || !strings.Contains(string(md), "| gateway-session |") {
		t.Errorf("report.md has no pinned table:\n%s", md)
	}
}

// TestPinnedRefusesOneCPU checks that the pinned setup says so and stops
// when this process may use a single CPU.
func TestPinnedRefusesOneCPU(t *testing.T) {
	allowed, err := testbed.AllowedCPUs()
	if err != nil {
		t.Skipf("CPU affinity is unavailable here: %v", err)
	}
	undo, err := testbed.PinSelf(allowed[:1])
	if err != nil {
		t.Skipf("CPU affinity is unavailable here: %v", err)
	}
	defer undo()
	o := options{scenarios: []string{pinnedScenario}, cfg: tiny(), out: t.TempDir(), pin: &testbed.Pin{EtcdCPUs: allowed[:1]}}
	if _, err := run(t.Context(), o, testWriter{t}); !errors.Is(err, testbed.ErrTooFewCPUs) {
		t.Fatalf("run on one CPU = %v; want ErrTooFewCPUs", err)
	}
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}
