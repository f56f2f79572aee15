package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/progress"
	"github.com/leasegate/leasegate/loadtest/internal/report"
	"github.com/leasegate/leasegate/loadtest/internal/scenario"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
)

// run sets the bed up, runs the chosen scenarios in order and writes what
// they measured, also when a scenario fails or the run is interrupted (the
// results so far are kept). It returns the files written.
func run(ctx context.Context, o options, stderr io.Writer) ([]string, error) {
	plan := planned(o)
	// A hard bound on the whole run, far above its plan.
	ctx, cancel := context.WithTimeout(ctx, 3*plan+5*time.Minute)
	defer cancel()

	bed, err := testbed.Start(ctx, testbed.Config{Endpoints: o.endpoints, Etcd: o.etcd, Redis: o.redis, Log: stderr, Pin: o.pin})
	if err != nil {
		return nil, err
	}
	defer bed.Close()

	res := &report.Results{
		Started: time.Now(),
		Command: o.command,
		Setup:   setupText(bed),
		Machine: testbed.ReadMachine(),
		Config:  report.SettingsOf(o.scenarios, o.cfg),
	}
	res.Notes = append(res.Notes, bed.Notes...)
	showBar := (o.progress || progress.IsTerminal(os.Stderr)) && plan > 3*time.Second
	env := &scenario.Env{Bed: bed, Cfg: o.cfg, Bar: progress.New(stderr, showBar, plan), Log: stderr}
	if o.cpuProfile != "" {
		if env.Prof, err = scenario.NewProfiler(o.cpuProfile); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(stderr, "running %s (planned about %s)\n", strings.Join(o.scenarios, ", "), plan.Round(time.Second))

	var runErr error
	for _, s := range o.scenarios {
		if err := ctx.Err(); err != nil {
			runErr = err
			break
		}
		var err error
		switch s {
		case "uncontested":
			res.Uncontested, err = env.Uncontested(ctx)
		case "openloop":
			res.OpenLoop, err = env.OpenLoop(ctx)
		case "contended":
			res.Contended, err = env.Contended(ctx)
		case "renewal":
			res.Renewal, err = env.Renewal(ctx)
		case "mixed":
			res.Mixed, err = env.Mixed(ctx)
		case "capacity":
			res.Capacity, err = env.Capacity(ctx)
		case pinnedScenario:
			res.Pinned, err = env.Pinned(ctx)
		}
		if err != nil {
			runErr = fmt.Errorf("scenario %s: %w", s, err)
			res.Notes = append(res.Notes, "The run stopped early: "+runErr.Error())
			break
		}
	}
	res.Finished = time.Now()
	if env.Prof != nil {
		var notes []string
		res.Layers, notes = env.Prof.Rows()
		for _, n := range notes {
			res.Notes = append(res.Notes, "CPU profile: "+n)
		}
		for _, r := range res.Layers {
			if r.File != "" {
				res.ProfileFiles = append(res.ProfileFiles, r.File)
			}
		}
	}
	paths, err := report.Write(o.out, res)
	if err != nil {
		return paths, err
	}
	slices.Sort(paths)
	return paths, runErr
}

// planned estimates the run's length from its configuration, for the
// progress bar's ETA and the run's hard time bound.
func planned(o options) time.Duration {
	c := o.cfg
	// One system's share of a scenario: its measured time, a short warmup
	// and a settle pause per round, and the first round's full warmup.
	share := func(measured time.Duration) time.Duration {
		return measured + time.Duration(c.Rounds)*(min(c.Warmup, 200*time.Millisecond)+c.Settle) + c.Warmup
	}
	renewWindow := c.RenewWindow
	if renewWindow == 0 {
		renewWindow = max(c.Duration, 2*c.RenewTTL/3+time.Second)
	}
	var d time.Duration
	for _, s := range o.scenarios {
		switch s {
		case "uncontested":
			d += 8*share(max(c.Duration/2, c.Warmup)) + 8*share(c.Duration)
		case "openloop":
			d += 5 * share(c.Duration)
		case "contended":
			// The closed loop, the delayed handoff, the drains (about 20 ms
			// a handoff) and the waiter-memory children.
			d += 4*share(c.Duration) + 3*share(c.Duration) +
				time.Duration(2*c.Rounds*c.DrainWaiters)*20*time.Millisecond + 20*time.Second
		case "renewal":
			d += 4 * (renewWindow + 2*time.Second)
		case "mixed":
			d += 2 * (c.Warmup + c.Duration + max(c.RenewTTL/3, 2*time.Second) + 2*time.Second)
		case "capacity":
			d += c.CapacityDuration
		case pinnedScenario:
			d += 5 * share(c.Duration)
		}
	}
	return d
}

func setupText(b *testbed.Bed) string {
	if p := b.Pinned(); p != nil {
		return fmt.Sprintf("pinned — one single-member etcd cluster (fsync on, etcd's default raft timing) in a process of its own on CPU %s, "+
			"and a gateway and the load generator in this process on CPU %s, all on 127.0.0.1; the baselines run on that etcd too", p.EtcdCPUs, p.GatewayCPUs)
	}
	if b.Embedded() {
		return fmt.Sprintf("embedded — three single-member etcd clusters (fsync on, etcd's default raft timing) and a gateway, all in this process on 127.0.0.1; "+
			"the baselines run on the gateway's home cluster %s, and the gateway's names in the side-by-side scenarios are chosen to route there", b.HomeShard)
	}
	home := "no etcd baselines (no --etcd)"
	if b.HomeShard != "" {
		home = fmt.Sprintf("baselines on cluster %s at %s, with the gateway's names chosen to route there", b.HomeShard, strings.Join(b.HomeEtcd, ","))
	}
	return fmt.Sprintf("external gateway(s) %s; %s", strings.Join(b.Gateways, ", "), home)
}
