//go:build linux

package chaos

import (
	"strings"
	"testing"
	"time"
)

// evicted returns a with a TTL of 2 s, evicted by a
// force-release sent at ev and answered 10 ms later, that believed until
// to.
func evicted(a AcquireOp, ev, to int) AcquireOp {
	a.TTL = 2 * time.Second
	a.Lost, a.LostProof, a.ToldEvicted, a.DoneAt, a.End, a.Deadline = true, true, true, at(to), at(to+5), at(to+1000)
	a.EvictedAt, a.EvictionDone = at(ev), at(ev+10)
	return a
}

// TestBeliefEviction: an overlap in which one holder was evicted before
// the other's grant, whichever began believing first, is excused while the evicted holder stops believing
// within its bound of the force-release's answer — 1.5 s once it has held
// longer than the SDK's hold watch delay (1 s), else its renewal interval
// (2 s / 3, jittered: 733 ms) + 1 s — and a violation naming the bound past
// it.
func TestBeliefEviction(t *testing.T) {
	for _, tc := range []struct {
		name     string
		granted  int // the evicted op's grant answered (ms)
		ev, to   int // eviction sent, belief ended (ms)
		next     int // the next holder's grant
		violates string
	}{
		{"watched, told 1.4 s after the answer", 100, 1300, 2710, 1320, ""},
		{"watched, told 1.6 s after the answer", 100, 1300, 2910, 1320, "1.5s"},
		{"unwatched, told 1.7 s after the answer", 100, 600, 2310, 620, ""},
		{"unwatched, told 1.8 s after the answer", 100, 600, 2410, 620, "733ms + 1s"},
		{"the next holder granted before the eviction", 100, 1300, 1400, 1290, "evicted at"},
		// A grant evicted before its SDK returned it, after the next
		// holder's grant: the evicted holder began believing last, and is
		// judged by the same bound.
		{"returned after its eviction, told in time", 1400, 1250, 1470, 1320, ""},
		{"returned after its eviction, told late", 1400, 1250, 3100, 1320, "from 12:00:01.400"},
	} {
		a := evicted(grant(0, "a", "x", 10, 0, tc.granted, 0), tc.ev, tc.to)
		b := grant(1, "b", "x", 12, 50, tc.next, 3500)
		vs := belief("x", []AcquireOp{a, b})
		switch {
		case tc.violates == "" && len(vs) != 0:
			t.Errorf("%s: belief = %v; want none", tc.name, vs)
		case tc.violates != "" && (len(vs) != 1 || !strings.Contains(vs[0].Detail, tc.violates)):
			t.Errorf("%s: belief = %v; want one overlap naming %q", tc.name, vs, tc.violates)
		}
	}
	// A semaphore of limit 2: a third holder joins two, one of which was
	// evicted and told in time.
	hs := withLimit(2, evicted(grant(0, "a", "x", 10, 0, 100, 0), 1300, 2000), grant(1, "b", "x", 11, 0, 110, 3000), grant(2, "c", "x", 12, 0, 1320, 3000))
	if vs := belief("x", hs); len(vs) != 0 {
		t.Errorf("belief(limit 2, one of two holders evicted and told in time) = %v; want none", vs)
	}
	hs[0] = evicted(hs[0], 1300, 3000)
	if vs := belief("x", hs); len(vs) != 1 || !strings.Contains(vs[0].Detail, "1.5s") {
		t.Errorf("belief(limit 2, the evicted holder told late) = %v; want one violation naming its bound", vs)
	}
}

// TestMarkEvicted: only a force-release that evicted the token, or may
// have (no answer), marks its grant — the first grant, never a hold of
// it — with its earliest send.
func TestMarkEvicted(t *testing.T) {
	parent := 0
	a := grant(0, "a", "x", 10, 0, 100, 2000)
	hold := grant(1, "a-1", "x", 10, 200, 210, 0)
	hold.HoldOf = &parent
	b := grant(2, "b", "x", 12, 0, 2100, 3000)
	c := grant(3, "c", "y", 10, 0, 100, 3000) // another name, the same token
	tok := a.Token
	ops := []AcquireOp{a, hold, b, c}
	markEvicted(ops, []Eviction{
		{Name: "x", Token: tok, Outcome: evictEvicted, Invoke: at(900), Complete: at(910)},
		{Name: "x", Token: tok, Outcome: evictUnknown, Invoke: at(800), Complete: at(1800)},
		{Name: "x", Token: b.Token, Outcome: evictRefused, Invoke: at(2200), Complete: at(2210)},
		{Name: "x", Token: b.Token, Outcome: evictFree, Invoke: at(2300), Complete: at(2310)},
	})
	if !ops[0].EvictedAt.Equal(at(800)) || !ops[0].EvictionDone.Equal(at(1800)) || !ops[0].EvictionUnsure {
		t.Errorf("op 0: evicted at %s, answered %s, unsure %v; want the unanswered force-release sent at 800", ts(ops[0].EvictedAt), ts(ops[0].EvictionDone), ops[0].EvictionUnsure)
	}
	for _, i := range []int{1, 2, 3} {
		if !ops[i].EvictedAt.IsZero() {
			t.Errorf("op %d marked evicted at %s; want unmarked", i, ts(ops[i].EvictedAt))
		}
	}
}

func TestEvictedHolders(t *testing.T) {
	base := grant(0, "a", "x", 10, 0, 100, 0)
	never := evicted(base, 1300, 0)
	never.DoneAt, never.End = time.Time{}, time.Time{}
	letGo := grant(0, "a", "x", 10, 0, 100, 1200)
	letGo.TTL, letGo.EvictedAt, letGo.EvictionDone = 2*time.Second, at(1300), at(1310)
	unsure := evicted(base, 1300, 9000)
	unsure.EvictionUnsure = true
	for _, tc := range []struct {
		name     string
		op       AcquireOp
		violates string
	}{
		{"told in time", evicted(base, 1300, 2000), ""},
		{"told late", evicted(base, 1300, 3000), "past its bound"},
		{"told late, unwatched", evicted(base, 600, 2500), "renewal interval"},
		{"never told", never, "never stopped believing"},
		{"let go before the eviction", letGo, ""},
		{"an eviction whose answer was lost", unsure, ""},
	} {
		vs := evictedHolders([]AcquireOp{tc.op})
		switch {
		case tc.violates == "" && len(vs) != 0:
			t.Errorf("%s: evictedHolders = %v; want none", tc.name, vs)
		case tc.violates != "" && (len(vs) != 1 || vs[0].Check != checkEvicted || !strings.Contains(vs[0].Detail, tc.violates)):
			t.Errorf("%s: evictedHolders = %v; want one %s violation naming %q", tc.name, vs, checkEvicted, tc.violates)
		}
	}
}

// TestEarlyLossEvicted: a loss proven before the holder's deadline is the
// eviction's when it came after the force-release was sent, and a
// violation when it came before.
func TestEarlyLossEvicted(t *testing.T) {
	a := evicted(grant(0, "a", "x", 10, 0, 100, 0), 1300, 1400)
	if vs := earlyLoss([]AcquireOp{a}); len(vs) != 0 {
		t.Errorf("earlyLoss(told after the eviction) = %v; want none", vs)
	}
	a.DoneAt = at(1200)
	if vs := earlyLoss([]AcquireOp{a}); len(vs) != 1 {
		t.Errorf("earlyLoss(told before the eviction was sent) = %v; want one", vs)
	}
}
