//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Result is the outcome of a run.
type Result struct {
	// Violations are the failed checks (goal: none).
	Violations []Violation `json:"violations"`
	// Injections are the faults injected.
	Injections []*Injection `json:"injections"`
	// OrphanKeys and OrphanLeases are what was left in etcd after
	// quiescence plus TTL.
	OrphanKeys, OrphanLeases int
	// Acquires and RegisterOps count the recorded operations.
	Acquires, Granted, RegisterOps int
	// Duration is the run's wall time; Seed its nemesis seed.
	Duration time.Duration
	Seed     uint64
	// Adversary counts the adversaries' calls: by "adversary: action",
	// then by outcome.
	Adversary map[string]map[string]int `json:"adversary"`
	// Roles counts the acquires by client role.
	Roles map[string]*RoleCount `json:"roles"`
	// Semaphores counts, by name, what the semaphore workers did.
	Semaphores map[string]*SemaphoreCount `json:"semaphores"`
	// Holds counts what the re-entrant workers did.
	Holds HoldCounts `json:"holds"`
	// Evictions counts the evict injections' force-releases and how soon
	// the evicted holders knew.
	Evictions EvictionCounts `json:"evictions"`
}

// RoleCount is what the clients of one role did.
type RoleCount struct {
	// Acquires, Granted and Lost count their acquires, those granted, and
	// the grants lost before release.
	Acquires, Granted, Lost int
	// Resumed counts acquires retried on another gateway after an aborted
	// or failed attempt; ResumedGranted those of them granted.
	Resumed, ResumedGranted int
}

// Run starts the system, runs the workload under cfg.Injections faults,
// quiesces, checks, and saves the histories to out. The error is for the
// harness failing, not for violations.
func Run(ctx context.Context, cfg Config, bins Binaries, out string, logf func(string, ...any)) (*Result, error) {
	began := time.Now()
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	recCtx, stopRec := context.WithCancel(ctx)
	defer stopRec()
	h, err := Start(recCtx, cfg, bins, out, logf)
	if err != nil {
		return nil, err
	}
	defer func() {
		h.Close()
		// The members' data is large and not part of the history.
		_ = os.RemoveAll(h.dataDir)
	}()
	defer func() {
		if err := h.Hist.save(out); err != nil {
			logf("save history: %v", err)
		}
	}()
	logf("system up in %s: clusters %v, gateways %s, names %v, semaphores %v, seed %d", time.Since(began).Round(time.Millisecond),
		h.clustersInMap(), h.frontURLs(), h.names, h.semaphores, cfg.Seed)
	nem, err := newNemesis(h, cfg.Seed)
	if err != nil {
		return nil, err
	}
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	wg, err := h.runWorkers(wctx)
	if err != nil {
		return nil, err
	}
	if err := h.runCampaigners(wctx, wg); err != nil {
		return nil, err
	}
	if err := h.runSemaphores(wctx, wg); err != nil {
		return nil, err
	}
	if err := h.runReentrants(wctx, wg, cfg.Seed); err != nil {
		return nil, err
	}
	if err := h.runPythonWorkers(wctx, wg, cfg.Seed); err != nil {
		return nil, err
	}
	if err := h.runAdversaries(wctx, wg, cfg.Seed); err != nil {
		return nil, err
	}
	compactCtx, stopCompact := context.WithCancel(ctx)
	go h.backgroundCompaction(compactCtx)

	sched := schedule(cfg, mrand.New(mrand.NewPCG(cfg.Seed, 7)))
	for i, kind := range sched {
		if kind == kindReshard && h.epochNow() >= 30 {
			kind = kindCompaction // keep tokens below 2^53 (epoch < 32)
		}
		in, err := nem.run(ctx, kind)
		if err != nil {
			stopCompact()
			return nil, fmt.Errorf("injection %d (%s on %s): %w", i, kind, in.Target, err)
		}
		logf("%3d %-19s %-28s unavailable %-8s %s%s", i, kind, in.Target, durStr(in.Unavailable), in.Note, violationStr(in))
		nem.sleep(ctx, cfg.Gap)
	}
	stopCompact()

	// Quiesce: stop the workload, let every lease lapse, then look for
	// what was left behind.
	stop := time.Now()
	stopWork()
	waitTimeout(wg.Wait, 30*time.Second)
	// From the moment the last worker is done, a lock's lease lapses within
	// its TTL — a pooled lease of the longest TTL any worker asked for too,
	// which no pass refreshes once nothing takes from its class — and a
	// gateway's idle attempt lease is revoked once it has had no reference
	// for AttemptTTL, seen at its next renewal tick (AttemptTTL/3 later).
	quiet := time.Now()
	lapse := max(cfg.TTL, h.longestTTL(), cfg.AttemptTTL+cfg.AttemptTTL/3)
	orphanKeys, orphanLeases := h.orphans(ctx, quiet.Add(lapse+1500*time.Millisecond), quiet.Add(lapse+5*time.Second))
	leaseNotes := h.describeLeases(ctx, orphanLeases)
	time.Sleep(500 * time.Millisecond) // let the recorder see the last deletions
	stopRec()
	h.rec.wait()

	res := &Result{Seed: cfg.Seed, OrphanKeys: len(orphanKeys), OrphanLeases: len(orphanLeases)}
	h.Hist.update(func() {
		noteStaleRevokes(h.Hist.Injections, func(m string) string { return filepath.Join(out, "logs", m+".log") })
	})
	res.Violations = h.check(stop, out)
	for _, k := range orphanKeys {
		res.Violations = append(res.Violations, Violation{Check: checkOrphans, Detail: k})
	}
	if len(orphanLeases) > 0 {
		res.Violations = append(res.Violations, Violation{Check: checkOrphans, Detail: fmt.Sprintf("%d leases left after quiescence and their lifetimes (TTL, idle attempt lease): %s", len(orphanLeases), strings.Join(leaseNotes, "; "))})
	}
	ops := h.Hist.snapshotAcquires()
	res.Semaphores = semaphoreFigures(h.semaphores, ops, res.Violations)
	h.Hist.update(func() {
		markEvicted(ops, h.Hist.Evictions)
		res.Holds = holdFigures(ops, h.Hist.Holds, res.Violations)
		res.Evictions = evictionFigures(ops, h.Hist.Evictions, res.Violations)
	})
	h.Hist.update(func() {
		res.Injections = h.Hist.Injections
		res.Acquires, res.RegisterOps = len(h.Hist.Acquires), len(h.Hist.Register)
		res.Roles = map[string]*RoleCount{}
		for _, op := range h.Hist.Acquires {
			rc := res.Roles[op.Role]
			if rc == nil {
				rc = &RoleCount{}
				res.Roles[op.Role] = rc
			}
			rc.Acquires++
			if op.Outcome == outGranted {
				res.Granted++
				rc.Granted++
			}
			if op.Lost {
				rc.Lost++
			}
			if len(op.Attempts) > 1 {
				rc.Resumed++
				if op.Outcome == outGranted {
					rc.ResumedGranted++
				}
			}
		}
		res.Adversary = map[string]map[string]int{}
		for _, a := range h.Hist.Adversary {
			k := a.Adversary + ": " + a.Action
			if res.Adversary[k] == nil {
				res.Adversary[k] = map[string]int{}
			}
			res.Adversary[k][a.Outcome]++
		}
	})
	res.Duration = time.Since(began)
	if b, err := json.MarshalIndent(res, "", " "); err == nil {
		_ = os.WriteFile(filepath.Join(out, "result.json"), b, 0o644)
	}
	return res, nil
}

// schedule lists the injections: every kind in turn first, so that even a
// short run covers them all, then random kinds.
func schedule(cfg Config, rng *mrand.Rand) []string {
	var out []string
	for len(out) < cfg.Injections {
		ks := append([]string(nil), Kinds...)
		if len(out) >= len(Kinds) {
			rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
		}
		out = append(out, ks...)
	}
	return out[:cfg.Injections]
}

func (h *Harness) epochNow() uint16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch
}

// backgroundCompaction compacts every 5 s, as an operator would.
func (h *Harness) backgroundCompaction(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
		for _, c := range h.Clusters {
			_ = h.rec.compact(ctx, c)
		}
	}
}

// noteTTL records ttl, the TTL a worker asked for its lock's lease.
func (h *Harness) noteTTL(ttl time.Duration) {
	for {
		cur := h.maxTTL.Load()
		if int64(ttl) <= cur || h.maxTTL.CompareAndSwap(cur, int64(ttl)) {
			return
		}
	}
}

// longestTTL is the longest TTL a worker asked for its lock's lease.
func (h *Harness) longestTTL() time.Duration { return time.Duration(h.maxTTL.Load()) }

// clusterLease is a lease found in one cluster.
type clusterLease struct {
	cluster *EtcdCluster
	id      clientv3.LeaseID
}

// orphans waits until from, then polls until until for lock keys and
// leases left in any cluster; it returns those still there at the end.
func (h *Harness) orphans(ctx context.Context, from, until time.Time) ([]string, []clusterLease) {
	time.Sleep(time.Until(from))
	for {
		var keys []string
		var leases []clusterLease
		for _, c := range h.Clusters {
			gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			resp, err := c.Client.Get(gctx, lockRoot, clientv3.WithPrefix())
			if err == nil {
				for _, kv := range resp.Kvs {
					keys = append(keys, fmt.Sprintf("%s: %s (lease %x, created at revision %d)", c.Name, kv.Key, kv.Lease, kv.CreateRevision))
				}
			}
			if ls, err := c.Client.Leases(gctx); err == nil {
				for _, l := range ls.Leases {
					leases = append(leases, clusterLease{c, l.ID})
				}
			}
			cancel()
		}
		if (len(keys) == 0 && len(leases) == 0) || time.Now().After(until) {
			return keys, leases
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// describeLeases says of each lease left behind what etcd knows of it:
// its TTL, what is left of it, and the keys on it (for a first look at who
// keeps renewing it).
func (h *Harness) describeLeases(ctx context.Context, leases []clusterLease) []string {
	var out []string
	for _, l := range leases {
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := l.cluster.Client.TimeToLive(gctx, l.id, clientv3.WithAttachedKeys())
		cancel()
		if err != nil {
			out = append(out, fmt.Sprintf("%s lease %x: %v", l.cluster.Name, int64(l.id), err))
			continue
		}
		keys := make([]string, len(r.Keys))
		for i, k := range r.Keys {
			keys[i] = string(k)
		}
		out = append(out, fmt.Sprintf("%s lease %x (granted TTL %ds, %ds left, keys %q)", l.cluster.Name, int64(l.id), r.GrantedTTL, r.TTL, keys))
	}
	return out
}

// check runs every checker over the recorded history.
func (h *Harness) check(stop time.Time, out string) []Violation {
	var vs []Violation
	if err := h.rec.gapErrors(); err != nil {
		vs = append(vs, Violation{Check: checkHistory, Detail: err.Error()})
	}
	for _, err := range h.harnessErrors() {
		vs = append(vs, Violation{Check: checkHistory, Detail: err.Error()})
	}
	for _, c := range h.crashReports() {
		vs = append(vs, Violation{Check: checkCrash, Detail: c})
	}
	var regOps []RegisterOp
	var keys []KeyEvent
	var clock []ClockSample
	var adv []AdversaryOp
	var holds []HoldOp
	var evictions []Eviction
	var injections []Injection
	h.Hist.update(func() {
		adv = append(adv, h.Hist.Adversary...)
		holds = append(holds, h.Hist.Holds...)
		evictions = append(evictions, h.Hist.Evictions...)
		for _, in := range h.Hist.Injections {
			injections = append(injections, *in)
		}
		regOps = append(regOps, h.Hist.Register...)
		keys = append(keys, h.Hist.Keys...)
		clock = append(clock, h.Hist.Clock...)
		for _, in := range h.Hist.Injections {
			if in.Violation != "" {
				vs = append(vs, Violation{Check: checkInjection, Detail: in.Kind + " " + in.Target + ": " + in.Violation})
			}
		}
	})
	ops := h.Hist.snapshotAcquires()
	markEvicted(ops, evictions)
	var clusters []string
	for _, c := range h.Clusters {
		clusters = append(clusters, c.Name)
	}
	ix := buildKeyIndex(keys, clock, clusters)
	vs = append(vs, checkRegister(regOps, out)...)
	vs = append(vs, checkGrants(ops, ix)...)
	vs = append(vs, earlyLoss(ops)...)
	attributeEarlyLosses(vs, ops, injections, ix)
	vs = append(vs, checkThieves(ops, ix)...)
	vs = append(vs, adversaryViolations(adv, injections)...)
	vs = append(vs, checkHolds(holds)...)
	vs = append(vs, evictedHolders(ops)...)
	vs = append(vs, stuckWaiters(ops, stop)...)
	return vs
}

func waitTimeout(wait func(), d time.Duration) {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

func durStr(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return d.Round(time.Millisecond).String()
}

func violationStr(in *Injection) string {
	if in.Violation == "" {
		return ""
	}
	return " VIOLATION: " + in.Violation
}
