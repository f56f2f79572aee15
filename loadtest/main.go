// Command loadtest measures leasegate side by side with what users would
// pick instead — the same etcd transactions issued directly, etcd's
// concurrency.Mutex, and redsync on redis-server — in one run on one
// machine, and writes JSON results, a Markdown report and SVG charts.
//
//	go run ./loadtest                          # everything, on an embedded setup (about 5 minutes)
//	go run ./loadtest --quick                  # everything, small (under a minute)
//	go run ./loadtest --scenario contended --duration 20s
//	go run ./loadtest --endpoint http://127.0.0.1:7070 --etcd shard-0=http://127.0.0.1:2379
//	go run ./loadtest --scenario uncontested,contended --duration 5s   # the performance figures
//	go run ./loadtest --scenario uncontested,openloop,contended,renewal --duration 5s --cpuprofile DIR
//	go run ./loadtest --scenario pinned --etcd-cpus 0 --gateway-cpus 1 --duration 5s --rounds 2
//
// The contended scenario also measures the handoff after a settled enqueue,
// the drain of a long queue and the gateway's memory per queued waiter; the
// mixed scenario holds locks renewing with cycles on top (the capacity
// model's check, docs/capacity.md). --cpuprofile writes a CPU profile per
// measured phase and a table of CPU per operation by layer (layers.md;
// go run ./loadtest/layers reads the profiles again).
//
// Without --endpoint it starts three embedded etcd clusters and a gateway
// in this process (internal/server), and the baselines share the gateway's
// home cluster. The pinned scenario runs alone, on a setup of its own:
// etcd in a process of its own pinned to --etcd-cpus, the gateway and the
// load generator in this one pinned to --gateway-cpus, so that etcd's CPU
// and raft entries per cycle are etcd's alone. It only ever sends traffic
// to loopback addresses, and every phase is bounded in time and in
// operations.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/scenario"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
)

// Scenario names, in the order a run performs them.
var allScenarios = []string{"uncontested", "openloop", "contended", "renewal", "mixed", "capacity"}

// pinnedScenario runs alone, on the pinned setup; "all" leaves it out.
const pinnedScenario = "pinned"

// options is the command line, resolved.
type options struct {
	endpoints []string
	etcd      string
	scenarios []string
	cfg       scenario.Config
	out       string
	progress  bool
	redis     bool
	command   string
	// cpuProfile is the directory for per-phase CPU profiles ("" none).
	cpuProfile string
	// pin places etcd and this process for the pinned scenario (nil for
	// the others).
	pin *testbed.Pin
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := scenario.Default()
	// Settings without a flag keep their defaults.
	o := options{cfg: d}
	var endpoints stringList
	var scn string
	var quick bool
	var maxRSSMiB int64
	var etcdCPUs, gatewayCPUs string
	fs.Var(&endpoints, "endpoint", "gateway base URL on loopback, e.g. http://127.0.0.1:7070 (repeatable); none: start an embedded setup")
	fs.StringVar(&o.etcd, "etcd", "", "with --endpoint: the home etcd cluster for the baselines, as shard-name=http://127.0.0.1:2379[,…]")
	fs.StringVar(&scn, "scenario", "all", "uncontested, openloop, contended, renewal, mixed, capacity or all (a comma-separated list works); or pinned, alone")
	fs.StringVar(&etcdCPUs, "etcd-cpus", "0", "pinned: the etcd process's CPUs, as taskset -c takes them (0, 0-1, 0,2)")
	fs.StringVar(&gatewayCPUs, "gateway-cpus", "", "pinned: this process's CPUs (the gateway and the load generator); empty: every other CPU")
	fs.IntVar(&o.cfg.Workers, "workers", d.Workers, "concurrent clients in the uncontested and open-loop scenarios")
	fs.DurationVar(&o.cfg.Duration, "duration", d.Duration, "measured time per system and phase")
	fs.DurationVar(&o.cfg.Warmup, "warmup", d.Warmup, "unrecorded warmup before each measured phase")
	fs.Float64Var(&o.cfg.Rate, "rate", d.Rate, "open-loop and mixed arrival rate, cycles per second")
	fs.IntVar(&o.cfg.Rounds, "rounds", d.Rounds, "interleaved slices each system's measured time is split into")
	fs.Int64Var(&o.cfg.MaxRequests, "max-requests", d.MaxRequests, "cap on operations measured per system and phase")
	fs.IntVar(&o.cfg.Names, "names", d.Names, "contended: names")
	fs.IntVar(&o.cfg.Waiters, "waiters", d.Waiters, "contended: clients per name")
	fs.DurationVar(&o.cfg.Hold, "hold", d.Hold, "contended: how long a holder keeps the lock")
	fs.DurationVar(&o.cfg.ReleaseDelay, "release-delay", d.ReleaseDelay, "contended, delayed handoff: release this long after the waiter's enqueue is confirmed")
	fs.IntVar(&o.cfg.DrainWaiters, "drain-waiters", d.DrainWaiters, "contended, drain: waiters queued behind the holder")
	fs.IntVar(&o.cfg.MemWaiters, "mem-waiters", d.MemWaiters, "contended, waiter memory: queued waiters measured")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "directory: profile each measured window's CPU, write one merged profile per phase and a CPU-by-layer table (layers.md)")
	fs.IntVar(&o.cfg.RenewLocks, "locks", d.RenewLocks, "renewal and mixed: locks held (K)")
	fs.IntVar(&o.cfg.RenewClients, "clients", d.RenewClients, "renewal and mixed: clients (sessions) holding them")
	fs.DurationVar(&o.cfg.RenewTTL, "renew-ttl", d.RenewTTL, "renewal and mixed: lease TTL")
	fs.DurationVar(&o.cfg.SessionTTL, "session-ttl", d.SessionTTL, "session TTL in the cycle scenarios")
	fs.DurationVar(&o.cfg.LockTTL, "lock-ttl", d.LockTTL, "per-lock lease TTL and Redis lock expiry")
	fs.Int64Var(&o.cfg.CapacityTarget, "capacity-target", d.CapacityTarget, "capacity: locks to hold")
	fs.DurationVar(&o.cfg.CapacityDuration, "capacity-duration", d.CapacityDuration, "capacity: time bound of the fill")
	fs.IntVar(&o.cfg.CapacityWorkers, "capacity-workers", d.CapacityWorkers, "capacity: acquires in flight")
	fs.IntVar(&o.cfg.CapacitySessions, "capacity-sessions", d.CapacitySessions, "capacity: sessions the locks attach to")
	fs.Int64Var(&maxRSSMiB, "max-rss", d.MaxRSS>>20, "capacity: stop the fill at this resident memory, MiB")
	fs.StringVar(&o.out, "out", "loadtest-results", "directory for results.json, report.md and the SVG charts")
	fs.BoolVar(&quick, "quick", false, "small counts and short phases (under a minute in all); explicit flags still win")
	fs.BoolVar(&o.progress, "progress", false, "draw the progress bar even when stderr is not a terminal")
	fs.BoolVar(&o.redis, "redis", true, "run the Redis (redsync) baseline when redis-server is installed")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.cfg.MaxRSS = maxRSSMiB << 20
	if quick {
		q := scenario.Quick()
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		overlay(&q, o.cfg, set)
		o.cfg = q
	}
	o.endpoints = endpoints
	var err error
	if o.scenarios, err = parseScenarios(scn); err != nil {
		return o, err
	}
	if o.pin, err = parsePin(o, etcdCPUs, gatewayCPUs, fs); err != nil {
		return o, err
	}
	o.command = "go run ./loadtest " + strings.Join(args, " ")
	return o, o.cfg.Validate()
}

// parsePin reads the CPU flags for the pinned scenario, which runs alone
// and on a setup of its own; the flags mean nothing to the other
// scenarios.
func parsePin(o options, etcdCPUs, gatewayCPUs string, fs *flag.FlagSet) (*testbed.Pin, error) {
	if !slices.Contains(o.scenarios, pinnedScenario) {
		var set []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "etcd-cpus" || f.Name == "gateway-cpus" {
				set = append(set, "--"+f.Name)
			}
		})
		if len(set) > 0 {
			return nil, fmt.Errorf("%s: only the pinned scenario (--scenario pinned) places processes on CPUs", strings.Join(set, ", "))
		}
		return nil, nil
	}
	if len(o.endpoints) > 0 {
		return nil, errors.New("--scenario pinned starts its own gateway and etcd process: give no --endpoint")
	}
	var p testbed.Pin
	var err error
	if p.EtcdCPUs, err = testbed.ParseCPUs(etcdCPUs); err != nil {
		return nil, fmt.Errorf("--etcd-cpus: %w", err)
	}
	if gatewayCPUs != "" {
		if p.GatewayCPUs, err = testbed.ParseCPUs(gatewayCPUs); err != nil {
			return nil, fmt.Errorf("--gateway-cpus: %w", err)
		}
	}
	return &p, nil
}

// overlay copies the explicitly set flags of c onto q.
func overlay(q *scenario.Config, c scenario.Config, set map[string]bool) {
	pick := map[string]func(){
		"workers": func() { q.Workers = c.Workers }, "duration": func() { q.Duration = c.Duration },
		"warmup": func() { q.Warmup = c.Warmup }, "rate": func() { q.Rate = c.Rate }, "rounds": func() { q.Rounds = c.Rounds },
		"max-requests": func() { q.MaxRequests = c.MaxRequests }, "names": func() { q.Names = c.Names },
		"waiters": func() { q.Waiters = c.Waiters }, "hold": func() { q.Hold = c.Hold },
		"release-delay": func() { q.ReleaseDelay = c.ReleaseDelay }, "drain-waiters": func() { q.DrainWaiters = c.DrainWaiters },
		"mem-waiters": func() { q.MemWaiters = c.MemWaiters },
		"locks":       func() { q.RenewLocks = c.RenewLocks }, "clients": func() { q.RenewClients = c.RenewClients },
		"renew-ttl": func() { q.RenewTTL = c.RenewTTL }, "session-ttl": func() { q.SessionTTL = c.SessionTTL },
		"lock-ttl": func() { q.LockTTL = c.LockTTL }, "capacity-target": func() { q.CapacityTarget = c.CapacityTarget },
		"capacity-duration": func() { q.CapacityDuration = c.CapacityDuration },
		"capacity-workers":  func() { q.CapacityWorkers = c.CapacityWorkers },
		"capacity-sessions": func() { q.CapacitySessions = c.CapacitySessions },
		"max-rss":           func() { q.MaxRSS = c.MaxRSS },
	}
	for name := range set {
		if f, ok := pick[name]; ok {
			f()
		}
	}
	if set["duration"] && !set["warmup"] {
		q.Warmup = min(c.Duration/8, time.Second)
	}
}

func parseScenarios(s string) ([]string, error) {
	want := map[string]bool{}
	parts := strings.Split(s, ",")
	for _, part := range parts {
		part = strings.TrimSpace(part)
		if part == pinnedScenario {
			if len(parts) > 1 {
				return nil, fmt.Errorf("scenario %q: the pinned scenario runs on a setup of its own; give it alone", s)
			}
			return []string{pinnedScenario}, nil
		}
		if part == "all" {
			return allScenarios, nil
		}
		ok := false
		for _, a := range allScenarios {
			ok = ok || a == part
		}
		if !ok {
			return nil, fmt.Errorf("scenario %q: want one of %s or all, or %s alone", part, strings.Join(allScenarios, ", "), pinnedScenario)
		}
		want[part] = true
	}
	var out []string
	for _, a := range allScenarios {
		if want[a] {
			out = append(out, a)
		}
	}
	return out, nil
}

func main() {
	if spec := os.Getenv(scenario.WaiterChildEnv); spec != "" {
		// A child of the waiter-memory measurement (see scenario.WaiterMemory).
		if err := scenario.RunWaiterChild(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "loadtest waiter child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(testbed.EtcdChildEnv); spec != "" {
		// The pinned setup's etcd process (see testbed.StartEtcdProcess).
		if err := testbed.RunEtcdChild(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "loadtest etcd process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	paths, err := run(ctx, o, os.Stderr)
	for _, p := range paths {
		fmt.Fprintln(os.Stderr, "wrote", p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}
