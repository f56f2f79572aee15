//go:build linux

package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/queue"
)

// The checkers are tested on small made-up histories: each must pass a
// correct one and flag the violation planted in a wrong one.

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestCheckRegister(t *testing.T) {
	ok := []RegisterOp{
		{Client: "a", Name: "x", Write: true, Token: 5, OK: true, Highest: 5, Invoke: at(0), Complete: at(10)},
		{Client: "b", Name: "x", Write: true, Token: 7, OK: true, Highest: 7, Invoke: at(20), Complete: at(30)},
		{Client: "a", Name: "x", Write: true, Token: 5, OK: false, Highest: 7, Invoke: at(40), Complete: at(50)},
		{Client: "c", Name: "y", Write: true, Token: 1, OK: true, Highest: 1, Invoke: at(40), Complete: at(50)},
		{Client: "b", Name: "x", Highest: 7, Invoke: at(60), Complete: at(70)},
	}
	dir := t.TempDir()
	if vs := checkRegister(ok, dir); len(vs) != 0 {
		t.Errorf("checkRegister(correct history) = %v; want no violation", vs)
	}
	// A stale token accepted after a newer one completed.
	bad := append(ok, RegisterOp{Client: "a", Name: "x", Write: true, Token: 6, OK: true, Highest: 6, Invoke: at(80), Complete: at(90)})
	vs := checkRegister(bad, dir)
	if len(vs) != 1 || vs[0].Check != checkLinear {
		t.Fatalf("checkRegister(stale write accepted) = %v; want one %s violation", vs, checkLinear)
	}
	if _, err := os.Stat(filepath.Join(dir, "register.html")); err != nil {
		t.Errorf("no visualization saved: %v", err)
	}
}

// grant is a granted acquire of name on c0 at epoch 1 with key revision
// rev, its waiter derived from request id req.
func grant(id int, req, name string, rev int64, invoke, complete, end int) AcquireOp {
	return AcquireOp{ID: id, Client: req, Role: "worker", Name: name, RequestID: req, Invoke: at(invoke),
		Complete: at(complete), End: at(end), Outcome: outGranted, Token: queue.Token(1, rev), Shard: "c0"}
}

func keyEvents(cluster, name, req string, epoch uint16, create, del int64) []KeyEvent {
	k := KeyEvent{Cluster: cluster, Name: name, Waiter: queue.WaiterID(req), Create: true, CreateRev: create, ModRev: create, Epoch: epoch}
	d := k
	d.Create, d.ModRev = false, del
	return []KeyEvent{k, d}
}

// clockEvery samples revision i at i×10 ms.
func clockEvery(cluster string, n int) []ClockSample {
	var out []ClockSample
	for i := 1; i <= n; i++ {
		out = append(out, ClockSample{Cluster: cluster, Rev: int64(i), Invoke: at(10 * i), Complete: at(10*i + 1)})
	}
	return out
}

func TestCheckGrants(t *testing.T) {
	clusters := []string{"c0", "c1"}
	var keys []KeyEvent
	keys = append(keys, keyEvents("c0", "x", "a", 1, 10, 20)...)
	keys = append(keys, keyEvents("c0", "x", "b", 1, 12, 30)...)
	good := []AcquireOp{
		grant(0, "a", "x", 10, 90, 100, 195),
		grant(1, "b", "x", 12, 110, 205, 290), // key ahead deleted at rev 20 (≈ 200 ms)
	}
	ix := buildKeyIndex(keys, clockEvery("c0", 40), clusters)
	if vs := checkGrants(good, ix); len(vs) != 0 {
		t.Errorf("checkGrants(correct history) = %v; want none", vs)
	}
	// A session lock granted under a fresh request id is backed by that
	// id's key; the same grant recorded without it is not.
	regranted := good[1]
	regranted.RequestID, regranted.GrantedUnder = "b-first", "b"
	if vs := checkGrants([]AcquireOp{good[0], regranted}, ix); len(vs) != 0 {
		t.Errorf("checkGrants(grant under a fresh request id) = %v; want none", vs)
	}
	regranted.GrantedUnder = ""
	if vs := checkGrants([]AcquireOp{good[0], regranted}, ix); len(vs) == 0 || vs[0].Check != checkBacked {
		t.Errorf("checkGrants(grant under an unrecorded request id) = %v; want a %s violation", vs, checkBacked)
	}
	tests := []struct {
		name  string
		ops   []AcquireOp
		keys  []KeyEvent
		check string
	}{
		{"granted before the key ahead was deleted", []AcquireOp{good[0], grant(1, "b", "x", 12, 110, 150, 290)}, keys, checkExclusion},
		{"holders believed at once", []AcquireOp{grant(0, "a", "x", 10, 90, 100, 260), good[1]}, keys, checkBelief},
		{"token not backed by a key", []AcquireOp{good[0], grant(1, "b", "x", 13, 110, 205, 290)}, keys, checkBacked},
		{"lower token after a completed grant", []AcquireOp{grant(0, "b", "x", 12, 90, 205, 290), grant(1, "a", "x", 10, 300, 310, 320)},
			append(keyEvents("c0", "x", "b", 1, 12, 30), keyEvents("c0", "x", "a", 1, 10, 20)...), checkTokens},
		{"old epoch still on another cluster", []AcquireOp{{ID: 0, Client: "a", Name: "x", RequestID: "a", Invoke: at(90), Complete: at(100),
			End: at(110), Outcome: outGranted, Token: queue.Token(2, 5), Shard: "c1"}},
			append(keyEvents("c1", "x", "a", 2, 5, 9), keyEvents("c0", "x", "b", 1, 12, 30)...), checkExclusion},
	}
	for _, tc := range tests {
		ix := buildKeyIndex(tc.keys, append(clockEvery("c0", 40), clockEvery("c1", 40)...), clusters)
		vs := checkGrants(tc.ops, ix)
		found := false
		for _, v := range vs {
			found = found || v.Check == tc.check
		}
		if !found {
			t.Errorf("%s: checkGrants = %v; want a %s violation", tc.name, vs, tc.check)
		}
	}
}

func TestFIFO(t *testing.T) {
	keys := append(keyEvents("c0", "x", "a", 1, 10, 20), keyEvents("c0", "x", "b", 1, 12, 30)...)
	ix := buildKeyIndex(keys, nil, []string{"c0"})
	a := grant(0, "a", "x", 12, 0, 300, 310) // enqueued first, at 10 ms…
	a.Queued = at(10)
	b := grant(1, "b", "x", 10, 50, 100, 200) // …but b, invoked later, got the lower token
	if vs := fifo("x", []AcquireOp{a, b}, ix); len(vs) != 1 {
		t.Errorf("fifo(inverted grants) = %v; want one violation", vs)
	}
	// a was granted under a fresh request id: its first place was given
	// up, and the key it was granted from was enqueued at an unknown time.
	a.RequestID, a.GrantedUnder = "a-first", "a"
	if vs := fifo("x", []AcquireOp{a, b}, ix); len(vs) != 0 {
		t.Errorf("fifo(grant under a fresh request id) = %v; want none", vs)
	}
	a.RequestID, a.GrantedUnder = "a", ""
	b.Invoke = at(5) // invoked before a was enqueued: no order is promised
	if vs := fifo("x", []AcquireOp{a, b}, ix); len(vs) != 0 {
		t.Errorf("fifo(concurrent enqueues) = %v; want none", vs)
	}
}

func TestStuckWaiters(t *testing.T) {
	stop := at(100000)
	ops := []AcquireOp{
		{ID: 0, Name: "x", Wait: time.Second, Invoke: at(0), Complete: at(1900), Outcome: outTimeout},                 // in time
		{ID: 1, Name: "x", Wait: time.Second, Invoke: at(0), Queued: at(50), Complete: at(2500), Outcome: outGranted}, // late
		{ID: 2, Name: "x", Wait: time.Second, Invoke: at(0), Complete: at(9000), Outcome: outTimeout},                 // never enqueued
		{ID: 3, Name: "x", Wait: time.Second, Invoke: at(0), Queued: at(50), Complete: at(6000), Outcome: outTimeout}, // cleanup
		{ID: 4, Name: "x", Wait: time.Second, Invoke: at(0)},                                                          // never returned
		{ID: 5, Name: "x", Wait: time.Second, Invoke: at(99900), Complete: at(102000), Outcome: outCanceled},          // run stopped
	}
	// Ops recorded with their attempts.
	att := func(start, end int) []Attempt { return []Attempt{{Start: at(start), End: at(end)}} }
	ops = append(ops,
		AcquireOp{ID: 6, Name: "x", Wait: time.Second, Invoke: at(0), Queued: at(50), Complete: at(2500), Outcome: outGranted,
			Attempts: att(0, 900)}, // granted in time, answered late: the SDK's renewal
		AcquireOp{ID: 7, Name: "x", Wait: time.Second, Invoke: at(0), Queued: at(50), LastQueued: at(50), Complete: at(9000), Outcome: outGranted,
			Attempts: append(att(0, 600), att(700, 9000)...)}, // the retry's enqueue stalled
		AcquireOp{ID: 8, Name: "x", Wait: time.Second, Invoke: at(0), Queued: at(50), LastQueued: at(800), Complete: at(6000), Outcome: outTimeout,
			Attempts: append(att(0, 600), att(700, 6000)...)}, // the retry was queued in time
	)
	want := map[string]string{"op 1 ": "", "op 2 ": knownEnqueueStall, "op 3 ": knownTimeoutCleanup, "op 4 ": "",
		"op 6 ": knownRenewAfterGrant, "op 7 ": knownEnqueueStall, "op 8 ": knownTimeoutCleanup}
	vs := stuckWaiters(ops, stop)
	if len(vs) != len(want) {
		t.Fatalf("stuckWaiters = %v; want %d violations", vs, len(want))
	}
	for _, v := range vs {
		found := false
		for prefix, known := range want {
			if strings.HasPrefix(v.Detail, prefix) {
				found = true
				if v.Known != known {
					t.Errorf("%s: known = %q; want %q", v.Detail, v.Known, known)
				}
			}
		}
		if !found {
			t.Errorf("unexpected violation %s", v.Detail)
		}
	}
}

func TestCheckGrantsSemaphore(t *testing.T) {
	clusters := []string{"c0"}
	var keys []KeyEvent
	keys = append(keys, keyEvents("c0", "x", "a", 1, 10, 20)...)
	keys = append(keys, keyEvents("c0", "x", "b", 1, 11, 25)...)
	keys = append(keys, keyEvents("c0", "x", "c", 1, 12, 30)...)
	ix := buildKeyIndex(keys, clockEvery("c0", 40), clusters)
	// Limit 2: a and b hold at once; c is granted once a's key is gone
	// (revision 20, ≈ 200 ms), while b still holds.
	good := withLimit(2,
		grant(0, "a", "x", 10, 90, 100, 195),
		grant(1, "b", "x", 11, 95, 105, 245),
		grant(2, "c", "x", 12, 150, 205, 295),
	)
	if vs := checkGrants(good, ix); len(vs) != 0 {
		t.Errorf("checkGrants(two holders of a limit-2 semaphore) = %v; want none", vs)
	}
	has := func(vs []Violation, check string) bool {
		for _, v := range vs {
			if v.Check == check {
				return true
			}
		}
		return false
	}
	// The same history judged as a lock's: b was granted while a held.
	if vs := checkGrants(withLimit(1, good...), ix); !has(vs, checkExclusion) || !has(vs, checkBelief) {
		t.Errorf("checkGrants(two holders at once, limit 1) = %v; want %s and %s violations", vs, checkExclusion, checkBelief)
	}
	// c granted while a and b both held: a third holder of a limit-2 name.
	early := withLimit(2, good[0], good[1], grant(2, "c", "x", 12, 150, 150, 295))
	if vs := checkGrants(early, ix); !has(vs, checkExclusion) || !has(vs, checkBelief) {
		t.Errorf("checkGrants(a third holder of a limit-2 semaphore) = %v; want %s and %s violations", vs, checkExclusion, checkBelief)
	}
	if vs := checkGrants(withLimit(3, early...), ix); len(vs) != 0 {
		t.Errorf("checkGrants(three holders of a limit-3 semaphore) = %v; want none", vs)
	}
	// Two concurrent holders with one token.
	twin := good[2]
	twin.ID, twin.Client, twin.RequestID = 3, "d", "d"
	twin.Token = good[1].Token
	if vs := distinctTokens("x", []AcquireOp{good[1], twin}); len(vs) != 1 || vs[0].Check != checkTokens {
		t.Errorf("distinctTokens(two holders of token %d) = %v; want one %s violation", twin.Token, vs, checkTokens)
	}
	if vs := distinctTokens("x", good); len(vs) != 0 {
		t.Errorf("distinctTokens(distinct tokens) = %v; want none", vs)
	}
}
