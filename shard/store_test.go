package shard

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/etcdtest"
)

func TestStoreLoadCompareAndSwap(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	ctx := testCtx(t)
	s := NewStore(cli, "")
	if s.Key() != "/leasegate/shardmap" {
		t.Fatalf("Key() = %q; want /leasegate/shardmap", s.Key())
	}

	if snap, err := s.Load(ctx); !errors.Is(err, ErrNoMap) || snap.ModRevision != 0 {
		t.Fatalf("Load(empty) = %+v, %v; want ErrNoMap", snap, err)
	}
	e1 := mapOf(1, "a", "b")
	s1, err := s.CompareAndSwap(ctx, Snapshot{}, e1)
	if err != nil || s1.ModRevision == 0 {
		t.Fatalf("CompareAndSwap(none, e1) = %+v, %v", s1, err)
	}
	if got, err := s.Load(ctx); err != nil || !reflect.DeepEqual(got, s1) {
		t.Fatalf("Load = %+v, %v; want %+v", got, err, s1)
	}

	// A second creator loses and learns the stored map.
	cur, err := s.CompareAndSwap(ctx, Snapshot{}, mapOf(1, "x"))
	if !errors.Is(err, ErrMapConflict) || !reflect.DeepEqual(cur, s1) {
		t.Fatalf("CompareAndSwap(none, ...) over a stored map = %+v, %v; want ErrMapConflict and %+v", cur, err, s1)
	}

	e1p := withPending(e1, mapOf(2, "a", "b", "c"))
	s2, err := s.CompareAndSwap(ctx, s1, e1p)
	if err != nil || s2.ModRevision <= s1.ModRevision {
		t.Fatalf("CompareAndSwap(e1, e1+pending) = %+v, %v", s2, err)
	}
	// A stale writer loses.
	if cur, err := s.CompareAndSwap(ctx, s1, e1); !errors.Is(err, ErrMapConflict) || cur.ModRevision != s2.ModRevision {
		t.Fatalf("stale CompareAndSwap = %+v, %v; want ErrMapConflict at revision %d", cur, err, s2.ModRevision)
	}
	// Invalid maps and forbidden transitions write nothing.
	if _, err := s.CompareAndSwap(ctx, s2, mapOf(0, "a")); !errors.Is(err, ErrInvalidMap) {
		t.Fatalf("CompareAndSwap(invalid) = %v; want ErrInvalidMap", err)
	}
	if _, err := s.CompareAndSwap(ctx, s2, mapOf(2, "a")); !errors.Is(err, ErrInvalidMap) || !strings.Contains(err.Error(), "pending") {
		t.Fatalf("CompareAndSwap(activate other than pending) = %v; want ErrInvalidMap", err)
	}
	s3, err := s.CompareAndSwap(ctx, s2, draining(mapOf(2, "a", "b", "c"), e1.Clusters, "a", "b"))
	if err != nil {
		t.Fatalf("CompareAndSwap(activate pending) = %v", err)
	}
	if got, err := s.Load(ctx); err != nil || !reflect.DeepEqual(got, s3) {
		t.Fatalf("Load = %+v, %v; want %+v", got, err, s3)
	}

	// Garbage under the key is reported with the key.
	cli.Put(ctx, s.Key(), "{not json")
	if _, err := s.Load(ctx); !errors.Is(err, ErrInvalidMap) || !strings.Contains(err.Error(), s.Key()) {
		t.Fatalf("Load(garbage) = %v; want ErrInvalidMap naming %s", err, s.Key())
	}
}

// The layout record goes in with the first map; a record of another
// layout refuses every read and write of the map, naming the record and
// both layouts, and nothing is written under it.
func TestStoreRefusesAnotherKeyLayout(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	ctx := testCtx(t)
	s := NewStore(cli, "/lay")
	s1, err := s.CompareAndSwap(ctx, Snapshot{}, mapOf(1, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(ctx, "/lay/layout"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != fmt.Sprint(KeyLayout) {
		t.Fatalf("layout record after the first map: %v, %v; want %d", resp, err, KeyLayout)
	}
	if _, err := s.Load(ctx); err != nil {
		t.Fatalf("Load under this build's layout = %v", err)
	}

	// A later release's record.
	if _, err := cli.Put(ctx, "/lay/layout", "2"); err != nil {
		t.Fatal(err)
	}
	want := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "/lay/layout") || !strings.Contains(err.Error(), `"2"`) ||
			!strings.Contains(err.Error(), fmt.Sprintf("layout %d", KeyLayout)) {
			t.Fatalf("%s under layout 2 = %v; want ErrLayout naming the record and both layouts", what, err)
		}
	}
	_, err = s.Load(ctx)
	want("Load", err)
	_, err = s.CompareAndSwap(ctx, s1, withPending(mapOf(1, "a"), mapOf(2, "a", "b")))
	want("CompareAndSwap", err)
	if got, err := cli.Get(ctx, s.Key()); err != nil || got.Kvs[0].ModRevision != s1.ModRevision {
		t.Fatalf("the map was written under another layout: %v, %v", got, err)
	}

	// And a first map under another layout's record is refused too.
	other := NewStore(cli, "/lay2")
	if _, err := cli.Put(ctx, "/lay2/layout", "2"); err != nil {
		t.Fatal(err)
	}
	_, err = other.Load(ctx)
	if !errors.Is(err, ErrLayout) {
		t.Fatalf("Load of an empty prefix under layout 2 = %v; want ErrLayout", err)
	}
	if _, err := other.CompareAndSwap(ctx, Snapshot{}, mapOf(1, "a")); !errors.Is(err, ErrLayout) {
		t.Fatalf("first CompareAndSwap under layout 2 = %v; want ErrLayout", err)
	}
	if got, err := cli.Get(ctx, other.Key()); err != nil || len(got.Kvs) != 0 {
		t.Fatalf("a first map was written under another layout: %v, %v", got, err)
	}
}

// next receives one map from ch or fails the test.
func next(t *testing.T, ch <-chan Map) Map {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return m
	case <-time.After(15 * time.Second):
		t.Fatal("no map delivered within 15s")
	}
	return Map{}
}

func TestStoreWatch(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t)
	cli := c.Client()
	ctx := testCtx(t)
	s := NewStore(cli, "/w")

	wctx, stop := context.WithCancel(ctx)
	ch := s.Watch(wctx)
	select {
	case m := <-ch:
		t.Fatalf("Watch delivered %+v before any map was stored", m)
	case <-time.After(100 * time.Millisecond): // absence of an event: a short look is all we can do
	}

	e1 := mapOf(1, "a", "b")
	s1, err := s.CompareAndSwap(ctx, Snapshot{}, e1)
	if err != nil {
		t.Fatal(err)
	}
	if m := next(t, ch); !reflect.DeepEqual(m, e1) {
		t.Fatalf("Watch delivered %+v; want %+v", m, e1)
	}

	// Garbage is skipped; the next good map arrives.
	cli.Put(ctx, s.Key(), "garbage")
	e1p := withPending(e1, mapOf(2, "a", "b", "c"))
	if _, err := s.CompareAndSwap(ctx, s1, e1p); !errors.Is(err, ErrMapConflict) || !errors.Is(err, ErrInvalidMap) {
		t.Fatalf("CompareAndSwap over garbage = %v; want ErrMapConflict and ErrInvalidMap", err)
	}
	cli.Put(ctx, s.Key(), string(must(e1p.Marshal())))
	if m := next(t, ch); !reflect.DeepEqual(m, e1p) {
		t.Fatalf("Watch delivered %+v; want %+v", m, e1p)
	}

	// The watch survives a restart of the home cluster.
	c.Restart()
	snap, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e2 := mapOf(2, "a", "b", "c")
	if _, err := s.CompareAndSwap(ctx, snap, e2); err != nil {
		t.Fatal(err)
	}
	if m := next(t, ch); !reflect.DeepEqual(m, e2) {
		t.Fatalf("Watch after restart delivered %+v; want %+v", m, e2)
	}

	// A second watcher starts with the current map.
	if m := next(t, s.Watch(wctx)); !reflect.DeepEqual(m, e2) {
		t.Fatalf("new Watch delivered %+v; want current %+v", m, e2)
	}

	stop()
	for range ch { // drains and ends: the channel closes when ctx is done
	}
}

// A watch whose start revision was compacted away re-reads instead of
// hanging.
func TestStoreWatchCompacted(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	ctx := testCtx(t)
	s := NewStore(cli, "")
	snap, err := s.CompareAndSwap(ctx, Snapshot{}, mapOf(1, "a"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{"http://a1:2379", "http://a2:2379", "http://a3:2379"} {
		m := mapOf(1, "a")
		m.Clusters[0].Endpoints = []string{ep}
		if snap, err = s.CompareAndSwap(ctx, snap, m); err != nil {
			t.Fatal(err)
		}
	}
	compact(t, cli)

	out := make(chan Map, 1)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.watch(wctx, out, 2); close(done) }()
	if m := next(t, out); !reflect.DeepEqual(m, snap.Map) {
		t.Fatalf("compacted watch delivered %+v; want current %+v", m, snap.Map)
	}
	stop()
	<-done
}

// A reader that falls behind gets the latest map, never an older one.
func TestStoreWatchCoalesces(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	ctx := testCtx(t)
	s := NewStore(cli, "")
	snap, err := s.CompareAndSwap(ctx, Snapshot{}, mapOf(1, "a"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch := s.Watch(wctx)
	next(t, ch)
	var last Map
	for i := range 20 {
		last = Map{Epoch: 1, Clusters: []Cluster{cl("a", fmt.Sprintf("http://a:%d", 1000+i))}}
		if snap, err = s.CompareAndSwap(ctx, snap, last); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever was skipped, maps arrive in order and end on the last one.
	prev := ""
	for m := next(t, ch); ; m = next(t, ch) {
		ep := m.Clusters[0].Endpoints[0]
		if ep <= prev {
			t.Fatalf("Watch delivered %s after %s; want newer maps only", ep, prev)
		}
		if prev = ep; reflect.DeepEqual(m, last) {
			break
		}
	}
}

// compact writes a key and compacts history up to it, so a watch from any
// earlier revision fails with ErrCompacted.
func compact(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	ctx := testCtx(t)
	resp, err := cli.Put(ctx, "/compact-probe", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// While the layout record names another layout, Watch delivers no map and
// says so; when the record is this build's again it delivers the map then
// stored, never one written while the record was another layout's.
func TestStoreWatchRefusesAnotherLayout(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	ctx := testCtx(t)
	s := NewStore(cli, "/lw")
	heard := make(chan error, 4)
	s.OnLayoutChange(func(err error) { heard <- err })
	e1 := mapOf(1, "a")
	if _, err := s.CompareAndSwap(ctx, Snapshot{}, e1); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch := s.Watch(wctx)
	if m := next(t, ch); !reflect.DeepEqual(m, e1) {
		t.Fatalf("Watch delivered %+v; want %+v", m, e1)
	}
	await := func(want bool) {
		t.Helper()
		select {
		case err := <-heard:
			if (err != nil) != want || (want && !errors.Is(err, ErrLayout)) {
				t.Fatalf("OnLayoutChange heard %v; want refused=%v (ErrLayout)", err, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("OnLayoutChange heard nothing within 15s; want refused=%v", want)
		}
	}

	put := func(key, val string) {
		t.Helper()
		if _, err := cli.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	put("/lw/layout", "2")
	await(true)
	// Written under another layout's record: never delivered.
	put(s.Key(), string(must(mapOf(1, "a", "b").Marshal())))
	put(s.Key(), "garbage")
	put("/lw/layout", "1")
	await(false)
	e3 := mapOf(1, "a", "c")
	put(s.Key(), string(must(e3.Marshal())))
	if m := next(t, ch); !reflect.DeepEqual(m, e3) {
		t.Fatalf("after the layout record was this build's again, Watch delivered %+v; want %+v (nothing written under layout 2)", m, e3)
	}

	// A watch started under another layout's record delivers nothing until
	// the record is this build's, and then the map stored.
	put("/lw/layout", "2")
	await(true)
	late := NewStore(cli, "/lw")
	lateHeard := make(chan error, 4)
	late.OnLayoutChange(func(err error) { lateHeard <- err })
	lch := late.Watch(wctx)
	select {
	case err := <-lateHeard:
		if !errors.Is(err, ErrLayout) {
			t.Fatalf("a Watch started under layout 2 heard %v; want ErrLayout", err)
		}
	case m := <-lch:
		t.Fatalf("a Watch started under layout 2 delivered %+v before hearing the refusal", m)
	case <-time.After(15 * time.Second):
		t.Fatal("a Watch started under layout 2 heard no refusal within 15s")
	}
	put("/lw/layout", "1")
	if m := next(t, lch); !reflect.DeepEqual(m, e3) {
		t.Fatalf("a Watch started under layout 2 delivered %+v once the record was this build's; want %+v", m, e3)
	}
}
