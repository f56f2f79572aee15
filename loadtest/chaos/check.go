//go:build linux

package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/leasegate/leasegate/queue"
)

// Violation is one failed check.
type Violation struct {
	// Check names the checker.
	Check string `json:"check"`
	// Name is the lock name concerned, if any.
	Name string `json:"name,omitempty"`
	// Detail says what was seen.
	Detail string `json:"detail"`
	// Ops are the ids of the acquire ops concerned, when the check knows
	// them (the first is the one the violation is about).
	Ops []int `json:"ops,omitempty"`
	// Known names the regression test of a known leasegate bug that
	// explains this violation. While the bug is open (openBugs) such
	// violations are reported but do not fail the run; once it is fixed
	// they are regressions. Empty for every other violation.
	Known string `json:"known,omitempty"`
	// Attributed names the regression test of a known bug that the
	// evidence puts at the moment of this violation, when the violation
	// fails the run all the same: two holders that believed at once are
	// never excused, whatever etcd did underneath.
	Attributed string `json:"attributed,omitempty"`
}

// knownEnqueueStall is the regression test of the gateway's bound on an
// Acquire's enqueue: the gateway bounds the enqueue by its request timeout
// and the whole call by the wait timeout, so that a stalled etcd (a killed
// or paused leader, a lost quorum, a silent link) cannot hold the caller
// past its deadline. A stuck waiter whose gateway had not even enqueued it
// by its deadline is put down to it.
const knownEnqueueStall = "TestRegressionEnqueueHonoursWaitTimeout"

// knownTimeoutCleanup is the regression test of the engine's prompt wait
// timeout: a wait that times out answers at once and removes its key in
// the background, so that with its cluster stalled a waiter does not hear
// of its own timeout an engine request timeout (5 s) late. A stuck waiter
// that was enqueued in time and ended with a wait timeout is put down to
// it.
const knownTimeoutCleanup = "TestRegressionWaitTimeoutAnswersPromptly"

// knownRenewAfterGrant is the regression test of the SDK's bound on the
// renewal that confirms a grant after a wait longer than one renew
// interval: client.Acquire bounds it, retries included, by the wait
// deadline plus its grace. A stuck waiter whose grant arrived in time is
// put down to it.
const knownRenewAfterGrant = "TestRegressionAcquireReturnsByWaitDeadline"

// knownUnconfirmedRelease is the regression test of the SDK's bound on
// letting go of a grant it could not confirm: when the renewal that
// confirms a grant after a long wait fails and the grant's own deadline
// has passed, client.Acquire waits for the release only until the wait
// deadline plus its grace and lets it finish in the background. A stuck
// waiter whose grant arrived in time and whose Acquire failed with that
// release is put down to it.
const knownUnconfirmedRelease = "TestRegressionUnconfirmedGrantReturnsByWaitDeadline"

// unconfirmedGrant is how the SDK says it released a grant it could not
// confirm.
const unconfirmedGrant = "granted, but no gateway confirmed the lease before its deadline"

// openBugs are the regression tests of bugs not fixed yet (in leasegate or
// in the etcd it runs on). Each
// is skipped (LEASEGATE_CHAOS_OPEN_BUGS=1 runs it), and a violation put
// down to one is reported but does not fail the run; a violation put down
// to a fixed bug is a regression and fails like any other.
var openBugs = map[string]bool{knownPausedLeaderRevokes: true}

// Checker names.
const (
	checkLinear    = "register-linearizable"
	checkBacked    = "grant-backed-by-key"
	checkTokens    = "tokens-increasing"
	checkExclusion = "no-overlapping-grants"
	checkBelief    = "no-overlapping-holders"
	checkEarlyLoss = "no-loss-before-deadline"
	checkThief     = "no-stolen-waiters"
	checkAdversary = "adversary-refused"
	checkFIFO      = "fifo"
	checkStuck     = "no-stuck-waiters"
	checkOrphans   = "no-orphans"
	checkHistory   = "history-complete"
	checkInjection = "injection"
	checkCrash     = "no-crashes"
)

// keyLife is one incarnation of a waiter key.
type keyLife struct {
	cluster, name, waiter string
	createRev, delRev     int64 // delRev math.MaxInt64 while never deleted
	epoch                 uint16
	delSeen               time.Time // when the recorder first received the deletion; zero when unknown
}

// keyIndex is the etcd revision history of every waiter key.
type keyIndex struct {
	byRev    map[string]map[int64]*keyLife // cluster → create revision
	byName   map[string]map[string][]*keyLife
	byWaiter map[string]int // waiter id → incarnations, all clusters
	clocks   map[string]revClock
}

// shardOf finds the cluster that has op's key: its waiter id, created at
// its token's revision. "" when none has.
func (ix *keyIndex) shardOf(op AcquireOp) string {
	_, rev, err := queue.SplitToken(op.Token)
	if err != nil {
		return ""
	}
	for c, byRev := range ix.byRev {
		if k := byRev[rev]; k != nil && k.name == op.Name && k.waiter == queue.WaiterID(op.RequestID) {
			return c
		}
	}
	return ""
}

// key returns op's key, or nil.
func (ix *keyIndex) key(op AcquireOp) *keyLife {
	_, rev, err := queue.SplitToken(op.Token)
	if err != nil {
		return nil
	}
	shard := op.Shard
	if shard == "" {
		shard = ix.shardOf(op)
	}
	return ix.byRev[shard][rev]
}

func buildKeyIndex(events []KeyEvent, samples []ClockSample, clusters []string) *keyIndex {
	ix := &keyIndex{byRev: map[string]map[int64]*keyLife{}, byName: map[string]map[string][]*keyLife{},
		byWaiter: map[string]int{}, clocks: map[string]revClock{}}
	for _, c := range clusters {
		ix.byRev[c] = map[int64]*keyLife{}
		ix.byName[c] = map[string][]*keyLife{}
		ix.clocks[c] = newRevClock(samples, c)
	}
	for _, e := range events {
		k := ix.byRev[e.Cluster][e.CreateRev]
		if k == nil {
			k = &keyLife{cluster: e.Cluster, name: e.Name, waiter: e.Waiter, createRev: e.CreateRev, delRev: math.MaxInt64, epoch: e.Epoch}
			ix.byRev[e.Cluster][e.CreateRev] = k
			ix.byName[e.Cluster][e.Name] = append(ix.byName[e.Cluster][e.Name], k)
			ix.byWaiter[e.Waiter]++
		}
		if !e.Create {
			k.delRev = e.ModRev
			if !e.Seen.IsZero() && (k.delSeen.IsZero() || e.Seen.Before(k.delSeen)) {
				k.delSeen = e.Seen
			}
		}
	}
	for _, byName := range ix.byName {
		for _, ks := range byName {
			sort.Slice(ks, func(i, j int) bool { return ks[i].createRev < ks[j].createRev })
		}
	}
	return ix
}

// checkGrants runs every check over grants and the key history.
func checkGrants(ops []AcquireOp, ix *keyIndex) []Violation {
	var vs []Violation
	add := func(check, name, format string, args ...any) {
		vs = append(vs, Violation{Check: check, Name: name, Detail: fmt.Sprintf(format, args...)})
	}
	grants := map[string][]AcquireOp{}
	keyOf := map[int]*keyLife{}
	for _, op := range ops {
		if op.Outcome != outGranted || op.HoldOf != nil {
			continue // a hold of a re-entered lock is its first grant's
		}
		if op.Shard == "" {
			op.Shard = ix.shardOf(op) // a leasectl holder knows its token, not its shard
		}
		grants[op.Name] = append(grants[op.Name], op)
		epoch, rev, err := queue.SplitToken(op.Token)
		k := ix.byRev[op.Shard][rev]
		switch {
		case err != nil:
			add(checkBacked, op.Name, "op %d: token %d: %v", op.ID, op.Token, err)
		case k == nil:
			add(checkBacked, op.Name, "op %d (%s): token %d names no key created at revision %d on %s", op.ID, op.Client, op.Token, rev, op.Shard)
		case k.name != op.Name || k.epoch != epoch || k.waiter != op.grantWaiter():
			add(checkBacked, op.Name, "op %d (%s): token %d is key %s/%s epoch %d, not this request's", op.ID, op.Client, op.Token, k.name, k.waiter, k.epoch)
		default:
			keyOf[op.ID] = k
		}
	}
	// Per cluster, epochs never go back in create order.
	for c, byName := range ix.byName {
		for name, ks := range byName {
			for i := 1; i < len(ks); i++ {
				if ks[i].epoch < ks[i-1].epoch {
					add(checkTokens, name, "%s: key at revision %d has epoch %d after a key of epoch %d (revision %d)", c, ks[i].createRev, ks[i].epoch, ks[i-1].epoch, ks[i-1].createRev)
				}
			}
		}
	}
	for name, gs := range grants {
		n := nameLimit(gs)
		vs = append(vs, tokenOrder(name, gs)...)
		if n > 1 {
			vs = append(vs, distinctTokens(name, gs)...)
		}
		vs = append(vs, belief(name, gs)...)
		vs = append(vs, fifo(name, gs, ix)...)
		for _, g := range gs {
			if k := keyOf[g.ID]; k != nil {
				vs = append(vs, exclusion(g, k, ix, n)...)
			}
		}
	}
	return vs
}

// nameLimit is the limit a name's grants are judged by: the smallest any
// of them recorded (the workload fixes one per name for the run, so they
// agree; were they to differ, the stricter one is the safe reading). A
// lock's is 1.
func nameLimit(gs []AcquireOp) int {
	n := 0
	for _, g := range gs {
		if n == 0 || g.limit() < n {
			n = g.limit()
		}
	}
	return max(n, 1)
}

// distinctTokens: the holders of a semaphore never share a token. A lock
// needs no such check: two grants of one token that overlap are two
// holders (belief), and two in turn are out of order (tokenOrder); a
// semaphore's concurrent holders are neither. One grant resumed by a retry
// of the same acquire, or granted again under the same request id, is one
// holder.
func distinctTokens(name string, gs []AcquireOp) []Violation {
	var vs []Violation
	seen := map[int64]AcquireOp{}
	for _, g := range gs {
		if p, ok := seen[g.Token]; ok && p.grantWaiter() != g.grantWaiter() {
			vs = append(vs, Violation{Check: checkTokens, Name: name, Ops: []int{p.ID, g.ID}, Detail: fmt.Sprintf(
				"op %d (%s) and op %d (%s) were both granted token %d of a semaphore of limit %d",
				p.ID, p.Client, g.ID, g.Client, g.Token, nameLimit(gs))})
			continue
		}
		seen[g.Token] = g
	}
	return vs
}

// tokenOrder: a grant that completed before another was invoked has the
// lower token.
func tokenOrder(name string, gs []AcquireOp) []Violation {
	byComplete := append([]AcquireOp(nil), gs...)
	sort.Slice(byComplete, func(i, j int) bool { return byComplete[i].Complete.Before(byComplete[j].Complete) })
	byInvoke := append([]AcquireOp(nil), gs...)
	sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].Invoke.Before(byInvoke[j].Invoke) })
	var vs []Violation
	var top *AcquireOp
	i := 0
	for _, g := range byInvoke {
		for i < len(byComplete) && byComplete[i].Complete.Before(g.Invoke) {
			if top == nil || byComplete[i].Token > top.Token {
				top = &byComplete[i]
			}
			i++
		}
		if top != nil && (top.Token > g.Token || top.Token == g.Token && top.RequestID != g.RequestID) {
			vs = append(vs, Violation{Check: checkTokens, Name: name, Detail: fmt.Sprintf(
				"op %d (%s) granted token %d at %s, before op %d (%s) was invoked at %s and granted token %d",
				top.ID, top.Client, top.Token, ts(top.Complete), g.ID, g.Client, ts(g.Invoke), g.Token)})
		}
	}
	return vs
}

// exclusion: the key of a grant became one of the first n of its name
// (fewer than n keys ahead of it on its cluster left; for a lock, n = 1,
// every one deleted) before the client had the grant, and every key of
// the name from an older epoch on another cluster was deleted before it
// too. Revisions are tied to time by the sampled linearizable reads: a
// revision is committed after the invoke of any read that returned less.
func exclusion(g AcquireOp, k *keyLife, ix *keyIndex, n int) []Violation {
	var vs []Violation
	var dels []int64
	for _, p := range ix.byName[k.cluster][k.name] {
		if p.createRev >= k.createRev {
			break
		}
		dels = append(dels, p.delRev)
	}
	// With m keys ahead, fewer than n are left from the revision the
	// (m-n+1)th of them to go was deleted at; for a lock, the last.
	ahead := int64(0)
	if len(dels) >= n {
		slices.Sort(dels)
		ahead = dels[len(dels)-n]
	}
	what := "the last key ahead of it"
	if n > 1 {
		what = fmt.Sprintf("the key ahead of it that left fewer than its limit %d", n)
	}
	if ahead == math.MaxInt64 {
		detail := fmt.Sprintf("op %d (%s) granted token %d on %s while a key ahead of it was never deleted", g.ID, g.Client, g.Token, k.cluster)
		if n > 1 {
			detail = fmt.Sprintf("op %d (%s) granted token %d on %s while %d of the keys ahead of it were never deleted (limit %d)",
				g.ID, g.Client, g.Token, k.cluster, len(dels)-slices.Index(dels, math.MaxInt64), n)
		}
		vs = append(vs, Violation{Check: checkExclusion, Name: g.Name, Detail: detail})
	} else if ahead > 0 {
		if t := ix.clocks[k.cluster].committedAfter(ahead); !g.Complete.After(t) {
			vs = append(vs, Violation{Check: checkExclusion, Name: g.Name, Detail: fmt.Sprintf(
				"op %d (%s) had token %d at %s, but %s on %s was deleted at revision %d, committed after %s",
				g.ID, g.Client, g.Token, ts(g.Complete), what, k.cluster, ahead, ts(t))})
		}
	}
	for c, byName := range ix.byName {
		if c == k.cluster {
			continue
		}
		for _, o := range byName[k.name] {
			if o.epoch >= k.epoch {
				continue
			}
			if o.delRev == math.MaxInt64 {
				vs = append(vs, Violation{Check: checkExclusion, Name: g.Name, Detail: fmt.Sprintf(
					"op %d (%s) granted token %d on %s while a key of epoch %d on %s (revision %d) was never deleted",
					g.ID, g.Client, g.Token, k.cluster, o.epoch, c, o.createRev)})
				continue
			}
			if t := ix.clocks[c].committedAfter(o.delRev); !g.Complete.After(t) {
				vs = append(vs, Violation{Check: checkExclusion, Name: g.Name, Detail: fmt.Sprintf(
					"op %d (%s) had token %d on %s at %s, but a key of epoch %d on %s was deleted at revision %d, committed after %s",
					g.ID, g.Client, g.Token, k.cluster, ts(g.Complete), o.epoch, c, o.delRev, ts(t))})
			}
		}
	}
	return vs
}

// fifo: among waiters that stayed (one incarnation of their key), one
// enqueued before another was invoked is granted first (lower token). A
// session lock granted under a fresh request id did not stay: its first key
// died with the lease its session replaced, and the key it was granted from
// was enqueued later, at a time the history does not know.
func fifo(name string, gs []AcquireOp, ix *keyIndex) []Violation {
	var st []AcquireOp
	for _, g := range gs {
		if g.GrantedUnder == "" && ix.byWaiter[g.grantWaiter()] == 1 {
			st = append(st, g)
		}
	}
	enq := func(g AcquireOp) time.Time {
		if !g.Queued.IsZero() {
			return g.Queued
		}
		return g.Complete
	}
	byEnq := append([]AcquireOp(nil), st...)
	sort.Slice(byEnq, func(i, j int) bool { return enq(byEnq[i]).Before(enq(byEnq[j])) })
	sort.Slice(st, func(i, j int) bool { return st[i].Invoke.Before(st[j].Invoke) })
	var vs []Violation
	var top *AcquireOp
	i := 0
	for _, g := range st {
		for i < len(byEnq) && enq(byEnq[i]).Before(g.Invoke) {
			if top == nil || byEnq[i].Token > top.Token {
				top = &byEnq[i]
			}
			i++
		}
		if top != nil && top.Token > g.Token {
			vs = append(vs, Violation{Check: checkFIFO, Name: name, Detail: fmt.Sprintf(
				"op %d (%s) was enqueued at %s, before op %d (%s) was invoked at %s, yet got token %d > %d",
				top.ID, top.Client, ts(enq(*top)), g.ID, g.Client, ts(g.Invoke), top.Token, g.Token)})
		}
	}
	return vs
}

// stuckWaiters lists acquires that returned more than a second after their
// wait timeout, or never, before stop (when the workload was cancelled).
func stuckWaiters(ops []AcquireOp, stop time.Time) []Violation {
	var vs []Violation
	for _, op := range ops {
		if op.Wait <= 0 {
			continue
		}
		limit := op.Invoke.Add(op.Wait + time.Second)
		switch {
		case op.Complete.IsZero():
			vs = append(vs, Violation{Check: checkStuck, Name: op.Name, Detail: fmt.Sprintf(
				"op %d (%s), invoked %s with wait %s, never returned", op.ID, op.Client, ts(op.Invoke), op.Wait)})
		case op.Complete.After(limit) && !(op.Outcome == outCanceled && op.Complete.After(stop)):
			v := Violation{Check: checkStuck, Name: op.Name, Detail: fmt.Sprintf(
				"op %d (%s), invoked %s with wait %s, returned %s after its deadline (%s: %s)",
				op.ID, op.Client, ts(op.Invoke), op.Wait, op.Complete.Sub(op.Invoke.Add(op.Wait)).Round(time.Millisecond), op.Outcome, op.Err)}
			v.Known = knownCause(op)
			vs = append(vs, v)
		}
	}
	return vs
}

// knownCause puts a late answer down to a known bug, or returns "". It
// looks at the Acquire attempt that answered: whether the gateway had
// enqueued the caller by the deadline (a queue position, or the grant of
// an attempt that was never queued), and when the answer arrived.
func knownCause(op AcquireOp) string {
	deadline := op.Invoke.Add(op.Wait)
	if op.Outcome == outError && strings.Contains(op.Err, unconfirmedGrant) &&
		(len(op.Attempts) == 0 || !op.Attempts[len(op.Attempts)-1].End.After(deadline)) {
		return knownUnconfirmedRelease // granted in time, released late
	}
	if len(op.Attempts) == 0 { // attempts unknown: the first report only
		switch {
		case op.Queued.IsZero() || op.Queued.After(deadline):
			return knownEnqueueStall
		case op.Outcome == outTimeout:
			return knownTimeoutCleanup
		}
		return ""
	}
	last := op.Attempts[len(op.Attempts)-1]
	var enqueued time.Time
	switch {
	case !op.LastQueued.IsZero() && !op.LastQueued.Before(last.Start):
		enqueued = op.LastQueued
	case op.Outcome == outGranted:
		enqueued = last.End // granted at once: the grant answered the enqueue
	}
	switch {
	case last.Start.After(deadline):
		return "" // the SDK retried past the deadline: not a known bug
	case enqueued.IsZero() || enqueued.After(deadline):
		return knownEnqueueStall
	case op.Outcome == outGranted && !last.End.After(deadline.Add(time.Second)):
		return knownRenewAfterGrant
	case op.Outcome == outTimeout:
		return knownTimeoutCleanup
	}
	return ""
}

func ts(t time.Time) string { return t.Format("15:04:05.000") }
