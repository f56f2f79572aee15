package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/loadtest/internal/layers"
	"github.com/leasegate/leasegate/loadtest/internal/report"
	"github.com/leasegate/leasegate/loadtest/internal/scenario"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(scenario.WaiterChildEnv); spec != "" {
		// Re-executed as the waiter-memory measurement's child.
		if err := scenario.RunWaiterChild(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "waiter child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(testbed.EtcdChildEnv); spec != "" {
		// Re-executed as the pinned setup's etcd process.
		if err := testbed.RunEtcdChild(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "etcd process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(etcdtest.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// tiny is a configuration that runs every scenario in seconds: it checks
// that the machinery works, not how fast anything is.
func tiny() scenario.Config {
	c := scenario.Quick()
	c.Workers = 4
	c.Duration = 400 * time.Millisecond
	c.Warmup = 50 * time.Millisecond
	c.Rounds = 1
	c.Settle = 20 * time.Millisecond
	c.IdleSample = 100 * time.Millisecond
	c.RenewWindow = time.Second
	c.Rate = 40
	c.Names, c.Waiters = 2, 2
	c.ReleaseDelay = 5 * time.Millisecond
	// Forty waiters: fewer put the per-waiter goroutine count within the
	// noise of other goroutines ending during the window.
	c.DrainWaiters, c.MemWaiters = 5, 40
	c.RenewLocks, c.RenewClients = 12, 2
	c.RenewTTL = 2 * time.Second
	c.CapacityTarget = 300
	c.CapacityDuration = 3 * time.Second
	c.CapacityWorkers, c.CapacitySessions = 8, 2
	return c
}

// TestSmoke runs every scenario on an embedded setup with tiny counts and
// checks that the JSON, the Markdown report and the charts are written and
// that the numbers are sane: something was measured by every system,
// nothing failed, and every ratio that could be computed is finite.
func TestSmoke(t *testing.T) {
	out := t.TempDir()
	o := options{scenarios: allScenarios, cfg: tiny(), out: out, redis: true, command: "go test ./loadtest", cpuProfile: filepath.Join(out, "prof")}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	paths, err := run(ctx, o, testWriter{t})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(paths) == 0 {
		t.Fatal("run wrote no files")
	}

	var res report.Results
	b, err := os.ReadFile(filepath.Join(out, report.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json does not parse: %v", err)
	}
	redis := testbed.RedisServerPath() != ""
	if !redis {
		t.Log("redis-server is not installed: the Redis baseline is skipped (apt-get install -y redis-server to cover it)")
	}
	wantSystems := []string{scenario.Direct, scenario.GatewaySession, scenario.GatewayPerLock, scenario.GatewayREST, scenario.Mutex, scenario.EtcdPut}
	if redis {
		wantSystems = append(wantSystems, scenario.RedsyncAlways, scenario.RedsyncEverysec)
	}

	u := res.Uncontested
	if u == nil {
		t.Fatal("no uncontested results")
	}
	checkRuns(t, "uncontested", u.Concurrent, wantSystems)
	// The floor is two raft writes a cycle (enqueue, release); a Put is one.
	for _, c := range []struct {
		sys      string
		min, max float64
	}{{scenario.Direct, 1.5, 4}, {scenario.EtcdPut, 0.8, 2}} {
		r := pick(u.Concurrent, c.sys)
		got := -1.0
		if len(r) == 1 && r[0].EtcdWritesPerOp != nil {
			got = *r[0].EtcdWritesPerOp
		}
		if got < c.min || got > c.max {
			t.Errorf("uncontested %s: etcd writes per op %v; want within [%g, %g]", c.sys, got, c.min, c.max)
		}
	}
	// One client for a fifth of a second may see no cycle of a slow system
	// end on a loaded machine; the ratios need only these two.
	checkRuns(t, "uncontested, 1 client", pick(u.Serial, scenario.Direct, scenario.GatewaySession), []string{scenario.Direct, scenario.GatewaySession})
	for _, r := range u.Serial {
		if r.Errors != 0 {
			t.Errorf("uncontested, 1 client, %s: %d errors: %v", r.System, r.Errors, r.ErrorSample)
		}
	}
	if res.OpenLoop == nil || len(res.OpenLoop.Runs) == 0 {
		t.Fatal("no open-loop results")
	}
	for _, r := range res.OpenLoop.Runs {
		checkRun(t, "open loop", r.Run)
		if r.Service.Count == 0 || r.Service.P50Ms > r.Latency.P99Ms+1e-9 && r.Latency.P99Ms > 0 && r.Service.P50Ms > r.Latency.MaxMs {
			t.Errorf("open loop %s: service %+v is not within latency %+v", r.System, r.Service, r.Latency)
		}
	}
	c := res.Contended
	if c == nil || len(c.Runs) == 0 {
		t.Fatal("no contended results")
	}
	for _, r := range c.Runs {
		checkRun(t, "contended", r.Run)
		if r.Overlaps != 0 {
			t.Errorf("contended %s: %d overlapping grants; want 0", r.System, r.Overlaps)
		}
		if r.Fairness <= 0 || r.Fairness > 1 {
			t.Errorf("contended %s: fairness %v is outside (0, 1]", r.System, r.Fairness)
		}
		if r.System != scenario.RedsyncAlways && r.System != scenario.RedsyncEverysec && r.FIFOViolations != 0 {
			t.Errorf("contended %s: %d FIFO violations; want 0 from a queue", r.System, r.FIFOViolations)
		}
	}
	checkContendedExtras(t, c, o.cfg)
	checkLayers(t, &res, out)
	if len(res.Figures) != 13 {
		t.Errorf("got %d figures; want 13", len(res.Figures))
	}
	for _, f := range res.Figures {
		// Five waiters' memory is within the noise of a GC of the embedded
		// etcd's heap, so its sign means nothing at smoke size: it must be
		// measured (finite); the waiter-memory check above proves the
		// measurement saw the waiters' goroutines.
		positive := !strings.HasPrefix(f.Name, "gateway memory per queued")
		if f.Value == nil || math.IsNaN(*f.Value) || math.IsInf(*f.Value, 0) || positive && *f.Value <= 0 {
			t.Errorf("figure %q = %v (%s, %s); want a finite positive number", f.Name, f.Value, f.Shown, f.Detail)
		}
	}
	rn := res.Renewal
	if rn == nil || len(rn.Runs) == 0 {
		t.Fatal("no renewal results")
	}
	for _, r := range rn.Runs {
		if r.Locks != o.cfg.RenewLocks && r.Locks != 5*o.cfg.RenewLocks {
			t.Errorf("renewal %s held %d locks; want %d or %d", r.Mode, r.Locks, o.cfg.RenewLocks, 5*o.cfg.RenewLocks)
		}
		if r.Keepalives <= 0 || r.Lost != 0 || r.Errors != 0 {
			t.Errorf("renewal %s: keepalives %v, lost %d, errors %d; want > 0, 0, 0", r.Mode, r.Keepalives, r.Lost, r.Errors)
		}
	}
	mx := res.Mixed
	if mx == nil || len(mx.Runs) != 2 {
		t.Fatalf("mixed: %+v; want session and per-lock runs", mx)
	}
	for _, r := range mx.Runs {
		checkRun(t, "mixed "+r.Mode, r.Cycles.Run)
		if r.Locks != o.cfg.RenewLocks || r.Lost != 0 || r.Errors != 0 || r.CPUPerSec <= 0 || r.WritesPerSec <= 0 {
			t.Errorf("mixed %s: %d locks, %d lost, %d errors, CPU %v s/s, %v writes/s; want %d locks, none lost, no errors, CPU and writes",
				r.Mode, r.Locks, r.Lost, r.Errors, r.CPUPerSec, r.WritesPerSec, o.cfg.RenewLocks)
		}
	}
	cp := res.Capacity
	if cp == nil || cp.Held <= 0 || cp.EtcdDBPerLock <= 0 {
		t.Fatalf("capacity: %+v; want locks held and a database size per lock", cp)
	}
	if len(res.Ratios) != 6 {
		t.Errorf("got %d ratios; want 6", len(res.Ratios))
	}
	for _, r := range res.Ratios {
		if r.Value == nil || math.IsNaN(*r.Value) || math.IsInf(*r.Value, 0) || *r.Value <= 0 {
			t.Errorf("ratio %q = %v (%s); want a finite positive number", r.Figure, r.Value, r.Shown)
		}
	}

	md, err := os.ReadFile(filepath.Join(out, report.MarkdownFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Headline ratios", "## Performance figures", "### Handoff after a settled enqueue", "### Drain of a long queue",
		"### Gateway memory per queued waiter", "## CPU by layer", "## Uncontested", "## Open loop", "## Contended", "## Renewal", "## Mixed load", "## Capacity", "p99.9"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if redis && !strings.Contains(string(md), "not a like-for-like safety peer") {
		t.Error("report.md does not say that Redis is not a like-for-like safety peer")
	}
	for _, name := range []string{"uncontested-latency.svg", "uncontested-throughput.svg", "contended-handoff.svg", "openloop-latency.svg", "capacity-memory.svg"} {
		svg, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Errorf("chart %s: %v", name, err)
			continue
		}
		if err := wellFormed(svg); err != nil {
			t.Errorf("chart %s is not well-formed XML: %v", name, err)
		}
		if !strings.Contains(string(md), "]("+name+")") {
			t.Errorf("report.md does not show %s", name)
		}
	}
}

// checkContendedExtras checks the delayed handoff, the drains and the
// waiter memory: each system measured, without errors.
func checkContendedExtras(t *testing.T, c *scenario.Contended, cfg scenario.Config) {
	t.Helper()
	if c.Delayed == nil {
		t.Fatal("no delayed-handoff results")
	}
	checkRuns(t, "delayed handoff", c.Delayed.Runs, []string{scenario.GatewaySession, scenario.Mutex, scenario.EtcdPut})
	if c.Drain == nil || len(c.Drain.Runs) != 2 {
		t.Fatalf("drain: %+v; want the gateway and Mutex", c.Drain)
	}
	for _, r := range c.Drain.Runs {
		if r.Errors != 0 || len(r.Seconds) != cfg.Rounds || r.MedianS <= 0 {
			t.Errorf("drain %s: %d drains, median %v s, errors %d %v; want %d drains, no errors", r.System, len(r.Seconds), r.MedianS, r.Errors, r.ErrorSample, cfg.Rounds)
		}
	}
	wm := c.WaiterMemory
	if wm == nil || len(wm.Runs) != 2 {
		t.Fatalf("waiter memory: %+v; want own and shared connections", wm)
	}
	for _, r := range wm.Runs {
		// A few waiters' growth can be lost in the heap's noise, but the
		// goroutines serving them cannot: each streaming waiter holds one
		// in the gateway's own code (its handler, parked in the wait). Other
		// layers' goroutines come and go apart from the waiters (the
		// embedded etcd server's, the runtime's), and so may a couple of
		// the gateway's background tasks during the window: those two are
		// allowed for.
		gw := r.GoroutinesByLayer[layers.Gateway] * float64(r.Waiters)
		t.Logf("waiter memory, %s connections: goroutines per waiter by layer %v", r.Connections, r.GoroutinesByLayer)
		if r.Error != "" || r.Waiters != cfg.MemWaiters || gw < float64(r.Waiters-2) {
			t.Errorf("waiter memory, %s connections: %+v; want %d waiters measured, a goroutine each in the gateway's code", r.Connections, r, cfg.MemWaiters)
		}
	}
}

// checkLayers checks the CPU profiles: a row per profiled phase with CPU
// in it, the merged profiles on disk, and layers.md.
func checkLayers(t *testing.T, res *report.Results, out string) {
	t.Helper()
	if len(res.Layers) == 0 {
		t.Fatal("--cpuprofile gave no CPU-by-layer rows")
	}
	seen := map[string]bool{}
	for _, r := range res.Layers {
		seen[strings.Fields(r.Label)[0]] = true
		if r.File == "" {
			t.Errorf("layers %q: no profile file", r.Label)
		} else if _, err := os.Stat(r.File); err != nil {
			t.Errorf("layers %q: %v", r.Label, err)
		}
	}
	for _, scn := range []string{"uncontested", "openloop", "contended", "renewal", "mixed"} {
		if !seen[scn] {
			t.Errorf("no CPU-by-layer row for %s", scn)
		}
	}
	// At 100 samples a second a tiny run's phase may catch none of the
	// gateway's frames; all of its gateway phases together do.
	gw := 0.0
	for _, r := range res.Layers {
		if strings.Contains(r.Label, "gateway") {
			gw += r.UsPerOp["gateway logic"] + r.UsPerOp["HTTP/2 + Connect"]
		}
	}
	if gw <= 0 {
		t.Error("no phase of the gateway's shows CPU in the gateway's logic or its HTTP/2 server")
	}
	if _, err := os.Stat(filepath.Join(out, report.LayersFile)); err != nil {
		t.Error(err)
	}
}

func checkRuns(t *testing.T, scn string, runs []scenario.Run, want []string) {
	t.Helper()
	got := map[string]bool{}
	for _, r := range runs {
		got[r.System] = true
		checkRun(t, scn, r)
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("%s: no results for %s", scn, w)
		}
	}
}

func pick(runs []scenario.Run, names ...string) []scenario.Run {
	var out []scenario.Run
	for _, r := range runs {
		for _, n := range names {
			if r.System == n {
				out = append(out, r)
			}
		}
	}
	return out
}

func checkRun(t *testing.T, scn string, r scenario.Run) {
	t.Helper()
	l := r.Latency
	switch {
	case r.Ops <= 0 || r.PerSec <= 0:
		t.Errorf("%s %s: %d ops, %v/s; want some", scn, r.System, r.Ops, r.PerSec)
	case r.Errors != 0:
		t.Errorf("%s %s: %d errors: %v", scn, r.System, r.Errors, r.ErrorSample)
	case !(l.P50Ms > 0 && l.P50Ms <= l.P90Ms && l.P90Ms <= l.P99Ms && l.P99Ms <= l.P999Ms && l.P999Ms <= l.MaxMs):
		t.Errorf("%s %s: percentiles out of order: %+v", scn, r.System, l)
	case r.CPUPerOpUs != nil && (math.IsNaN(*r.CPUPerOpUs) || *r.CPUPerOpUs < 0):
		t.Errorf("%s %s: CPU per op %v", scn, r.System, *r.CPUPerOpUs)
	}
}

func wellFormed(b []byte) error {
	d := xml.NewDecoder(strings.NewReader(string(b)))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// testWriter sends the run's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
