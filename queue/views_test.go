package queue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ruleHolds is the grant rule as doc.go states it ("Semaphores"), written
// out on its own as the tests' oracle: the key at i, of limit limits[i],
// holds when fewer than limits[i] keys are ahead of it and every one of
// them records limits[i].
func ruleHolds(limits []int, i int) bool {
	n := limits[i]
	if i >= n {
		return false
	}
	for _, l := range limits[:i] {
		if l != n {
			return false
		}
	}
	return true
}

// rulePosition is the place the Acquire stream reports for key i: 0 for a
// holder, 1 for the waiter granted next, k - N + 1 with k keys ahead.
func rulePosition(limits []int, i int) int64 {
	if ruleHolds(limits, i) {
		return 0
	}
	return max(int64(i-limits[i]+1), 1)
}

// viewFacts is what a view says of one name: holder clients and each
// client's position.
type viewFacts struct {
	holders   []string
	positions map[string]int64
}

func factsOf(es []QueueEntry) viewFacts {
	f := viewFacts{positions: map[string]int64{}}
	for _, en := range es {
		if en.Holder() {
			f.holders = append(f.holders, en.ClientID)
		}
		f.positions[en.ClientID] = en.Position
	}
	return f
}

// Every view of a name's holders — ListLocks, DescribeQueue, Describe,
// CheckFence, force-release's choice by token and the watch's snapshot
// and events — judges holders by the engine's grant rule, and numbers the
// queue as the Acquire stream does, for queues whose keys carry any mix of
// limits (a refused acquire's key behind holders of another limit, a
// semaphore with fewer holders than its limit).
func TestViewsJudgeHoldersByTheGrantRule(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	rng := rand.New(rand.NewPCG(24, 7))
	for round := range 40 {
		name := fmt.Sprintf("v/%02d", round)
		lease, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		limits := make([]int, 1+rng.IntN(6))
		clients := make([]string, len(limits))
		for i := range limits {
			limits[i] = 1 + rng.IntN(3)
			clients[i] = fmt.Sprintf("c%d", i)
			putSemWaiter(t, e, cli, name, clients[i], limits[i], lease.ID)
		}
		var want viewFacts
		want.positions = map[string]int64{}
		for i, c := range clients {
			if ruleHolds(limits, i) {
				want.holders = append(want.holders, c)
			}
			want.positions[c] = rulePosition(limits, i)
		}
		check := func(view string, got viewFacts) {
			t.Helper()
			if !slices.Equal(got.holders, want.holders) || fmt.Sprint(got.positions) != fmt.Sprint(want.positions) {
				t.Fatalf("limits %v: %s says holders %v positions %v; the grant rule: %v %v", limits, view, got.holders, got.positions, want.holders, want.positions)
			}
		}

		page, err := e.ListLocks(ctx, name, "", 10)
		if err != nil || len(page.Locks) != 1 {
			t.Fatalf("ListLocks: %v, %v", page, err)
		}
		check("ListLocks", factsOf(page.Locks[0].Entries))
		if w := page.Locks[0].Waiters(); w != int64(len(limits)-len(want.holders)) {
			t.Fatalf("limits %v: ListLocks counts %d waiters; want %d", limits, w, len(limits)-len(want.holders))
		}
		info, err := e.DescribeQueue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		check("DescribeQueue", factsOf(info.Entries))

		d, err := e.Describe(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var dh []string
		for _, h := range d.Holders {
			dh = append(dh, h.ClientID)
		}
		if !slices.Equal(dh, want.holders) || d.Waiters != int64(len(limits)-len(want.holders)) {
			t.Fatalf("limits %v: Describe says holders %v, %d waiters; the grant rule: %v", limits, dh, d.Waiters, want.holders)
		}

		for _, en := range info.Entries {
			holds := slices.Contains(want.holders, en.ClientID)
			live, _, err := e.CheckFence(ctx, name, en.Token)
			if err != nil || live != holds {
				t.Fatalf("limits %v: CheckFence(%s's token) = %v, %v; holds: %v", limits, en.ClientID, live, err, holds)
			}
			_, err = e.forceTarget(ctx, e.keys.namePrefix(name), en.Token)
			if (err == nil) != holds || (err != nil && !errors.Is(err, ErrHolderChanged)) {
				t.Fatalf("limits %v: force-release would pick %s by token: %v; holds: %v", limits, en.ClientID, err, holds)
			}
		}

		ch, _ := watchEvents(t, e, name, 0)
		snap := nextBatch(t, ch)
		var es []QueueEntry
		for _, ev := range snap.Events {
			if (ev.Type == EventHeld) != ev.Entry.Holder() {
				t.Fatalf("snapshot event %s for an entry whose holder flag is %v", ev.Type, ev.Entry.Holder())
			}
			es = append(es, ev.Entry)
		}
		check("the watch's snapshot", factsOf(es))

		// One key goes: the watch's events move the holders as the rule,
		// applied before and after, does.
		gone := rng.IntN(len(limits))
		if _, err := cli.Delete(ctx, e.keys.waiter(name, WaiterID(clients[gone]))); err != nil {
			t.Fatal(err)
		}
		after := slices.Delete(slices.Clone(limits), gone, gone+1)
		afterClients := slices.Delete(slices.Clone(clients), gone, gone+1)
		var wantEvs []string
		if ruleHolds(limits, gone) {
			wantEvs = append(wantEvs, fmt.Sprintf("expired %s %s@0", name, clients[gone]))
		} else {
			wantEvs = append(wantEvs, fmt.Sprintf("left %s %s@%d", name, clients[gone], rulePosition(limits, gone)))
		}
		for i, c := range afterClients {
			if ruleHolds(after, i) && !ruleHolds(limits, slices.Index(clients, c)) {
				wantEvs = append(wantEvs, fmt.Sprintf("held %s %s@0", name, c))
			}
		}
		if got := eventsOf(nextBatch(t, ch)); !slices.Equal(got, wantEvs) {
			t.Fatalf("limits %v, key %d deleted: the watch says %v; the grant rule: %v", limits, gone, got, wantEvs)
		}
		if _, err := cli.Revoke(ctx, lease.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// An acquire refused for its limit puts its key and takes it back: behind
// a semaphore with fewer holders than its limit, its key is never a
// holder, so the watch reports it queued and gone, never held and
// expired.
func TestWatchNeverReportsARefusedAcquireAsHeld(t *testing.T) {
	e, _ := newEngine(t)
	ctx := testCtx(t)
	ch, _ := watchEvents(t, e, "", 0)
	nextBatch(t, ch) // the empty snapshot
	r := req("sem")
	r.Limit = 3
	holder := mustAcquire(t, e, r)
	if got := eventsOf(nextBatch(t, ch)); !slices.Equal(got, []string{"held sem c@0"}) {
		t.Fatalf("the semaphore's first holder: %v", got)
	}
	lock := req("sem")
	lock.ClientID = "refused"
	if _, err := acquire(ctx, e, lock); !errors.Is(err, ErrLimitMismatch) {
		t.Fatalf("an acquire of limit 1 on a semaphore of 3: %v; want ErrLimitMismatch", err)
	}
	var got []string
	for len(got) < 2 {
		got = append(got, eventsOf(nextBatch(t, ch))...)
	}
	if want := []string{"queued sem refused@1", "left sem refused@1"}; !slices.Equal(got, want) {
		t.Fatalf("the refused acquire: %v; want %v", got, want)
	}
	d, err := e.Describe(ctx, "sem")
	if err != nil || len(d.Holders) != 1 || d.Holders[0].Token != holder.Token() {
		t.Fatalf("Describe after the refusal: %+v, %v; want the one holder", d, err)
	}
}

// putRaw writes a key under a name's prefix that is no waiter value.
func putRaw(t *testing.T, e *Engine, cli *clientv3.Client, name, waiter, value string) {
	t.Helper()
	if _, err := cli.Put(testCtx(t), e.keys.waiter(name, waiter), value); err != nil {
		t.Fatal(err)
	}
}

// A key whose value the engine cannot read still stands in its queue, as
// the hub judges it: first, it holds and withholds everyone behind it;
// behind a holder, it holds nothing. The views number the others as if it
// were not unreadable.
func TestViewsKeepAnUnreadableKeyInLine(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, e, cli, "u", "x", "not a waiter value")
	putSemWaiter(t, e, cli, "u", "a", 1, lease.ID)
	info, err := e.DescribeQueue(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Entries) != 2 || !info.Entries[0].Holder() || info.Entries[1].Holder() || info.Entries[1].Position != 1 {
		t.Fatalf("entries %+v; want the unreadable key holding and a at position 1", info.Entries)
	}
}

// Elections are listed, described and watched as elections: under their
// own names, marked Election, never as a lock named with the NUL marker;
// a prefix selects elections and locks alike, and a walk a page at a time
// lists each once, elections first, each kind in key order ("sched-x/"
// sorts before "sched/").
func TestViewsListElectionsAsElections(t *testing.T) {
	e, _ := newEngine(t)
	ctx := testCtx(t)
	ch, _ := watchEvents(t, e, "s", 0)
	nextBatch(t, ch)
	mustAcquire(t, e, req(ElectionName("sched")))
	if b := nextBatch(t, ch); len(b.Events) != 1 || b.Events[0].Name != "sched" || !b.Events[0].Election {
		t.Fatalf("the watch reports the campaign as %+v; want the election sched", b.Events)
	}
	mustAcquire(t, e, req("sched"))
	mustAcquire(t, e, req("sched-x"))
	mustAcquire(t, e, req(ElectionName("other")))
	type item struct {
		name     string
		election bool
	}
	walk := func(prefix string) []item {
		var out []item
		after := ""
		for {
			page, err := e.ListLocks(ctx, prefix, after, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range page.Locks {
				out = append(out, item{l.Name, l.Election})
				after = l.Cursor
			}
			if !page.More {
				return out
			}
		}
	}
	if got, want := walk(""), []item{{"other", true}, {"sched", true}, {"sched-x", false}, {"sched", false}}; !slices.Equal(got, want) {
		t.Fatalf("ListLocks(\"\") walked %v; want %v", got, want)
	}
	if got, want := walk("sch"), []item{{"sched", true}, {"sched-x", false}, {"sched", false}}; !slices.Equal(got, want) {
		t.Fatalf("ListLocks(\"sch\") walked %v; want %v", got, want)
	}
	info, err := e.DescribeQueue(ctx, ElectionName("sched"))
	if err != nil || info.Name != "sched" || !info.Election || len(info.Entries) != 1 || !info.Entries[0].Holder() {
		t.Fatalf("DescribeQueue of the election: %+v, %v", info, err)
	}
	if _, err := e.ListLocks(ctx, "sch", NameCursor(ElectionName("other")), 1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a cursor outside the prefix: %v; want ErrInvalidArgument", err)
	}
	ch2, _ := watchEvents(t, e, "", 0)
	var snap []item
	for _, ev := range nextBatch(t, ch2).Events {
		snap = append(snap, item{ev.Name, ev.Election})
	}
	if want := []item{{"other", true}, {"sched", true}, {"sched-x", false}, {"sched", false}}; !slices.Equal(snap, want) {
		t.Fatalf("the watch's snapshot lists %v; want %v", snap, want)
	}
}
