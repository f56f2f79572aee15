package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

// Benchmarks of the fleet APIs beside etcd doing the same reads and
// watches directly, in the same run (absolute figures on a shared machine
// are noise; the ratios are the result):
//
//	go test ./gateway -run '^$' -bench 'ListLocks|Watch' -benchtime=2s
//
// The locks are written straight into etcd in the engine's key layout (a
// lock is a key; building 10,000 of them through Acquire would only slow
// the setup), on the shard the router places each name on.

// benchFleet is three etcd clusters, a gateway over them, and a client of
// each cluster by shard name.
type benchFleet struct {
	g    *gw
	etcd map[string]*clientv3.Client
	// header is the owner line of a waiter value the gateway wrote: the
	// keys written straight into etcd carry it as the engine's do.
	header string
}

func startBenchFleet(b *testing.B) *benchFleet {
	b.Helper()
	f := &benchFleet{etcd: map[string]*clientv3.Client{}}
	var clusters []server.Cluster
	for i := range 3 {
		c := etcdtest.Start(b)
		name := fmt.Sprintf("c%d", i)
		clusters = append(clusters, server.Cluster{Name: name, Endpoints: []string{c.Endpoint()}})
		f.etcd[name] = c.ClientFor(b)
	}
	f.g = gwtest.Start(b, nil, gwtest.Clusters(clusters...))
	f.header = f.ownerHeader(b)
	return f
}

// ownerHeader takes a lock through the gateway and returns the first line
// of its waiter value, the one that proves the key's owner.
func (f *benchFleet) ownerHeader(b *testing.B) string {
	b.Helper()
	ctx := context.Background()
	c, err := client.New([]string{f.g.URL})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const name = "bench-header"
	l, err := c.TryAcquire(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release(ctx)
	resp, err := f.etcd[l.Shard()].Get(ctx, queue.NamePrefix(f.g.Prefix, name), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		b.Fatalf("the gateway's waiter key: %v", err)
	}
	header, _, ok := strings.Cut(string(resp.Kvs[0].Value), "\n")
	if !ok {
		b.Fatalf("waiter value %q has no header line", resp.Kvs[0].Value)
	}
	return header + "\n"
}

// lockValue is a waiter value as the engine writes it.
func (f *benchFleet) lockValue(client string) string {
	return f.header + fmt.Sprintf(`{"c":%q,"t":30,"e":0,"s":"00","q":%d}`, client, time.Now().UnixMilli())
}

// fill writes n locks "bench/%06d" (one holder key each), each shard's in
// transactions of 100 puts. With perLock every key gets a lease of its
// own (as locks outside sessions have); otherwise each shard's keys share
// one lease (as a session's do).
func (f *benchFleet) fill(b *testing.B, n int, perLock bool) []string {
	b.Helper()
	ctx := context.Background()
	byShard := map[string][]string{}
	var names []string
	for i := range n {
		name := fmt.Sprintf("bench/%06d", i)
		t, err := f.g.Server.Router().Route(name, "")
		if err != nil {
			b.Fatal(err)
		}
		byShard[t.Shard] = append(byShard[t.Shard], name)
		names = append(names, name)
	}
	var wg sync.WaitGroup
	for shard, ns := range byShard {
		cli := f.etcd[shard]
		wg.Go(func() {
			shared, err := cli.Grant(ctx, 600)
			if err != nil {
				b.Error(err)
				return
			}
			for i := 0; i < len(ns); i += 100 {
				var ops []clientv3.Op
				for _, name := range ns[i:min(i+100, len(ns))] {
					lease := shared.ID
					if perLock {
						l, err := cli.Grant(ctx, 600)
						if err != nil {
							b.Error(err)
							return
						}
						lease = l.ID
					}
					ops = append(ops, clientv3.OpPut(queue.NamePrefix(f.g.Prefix, name)+queue.WaiterID(name), f.lockValue("bench"), clientv3.WithLease(lease)))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return names
}

// BenchmarkListLocksPage reads pages of 100 of 10,000 locks on 3 shards
// through the gateway (one op = one page), beside the etcd range reads a
// page costs at the least: one range of 100 keys on one shard, and three
// in parallel (one per shard).
func BenchmarkListLocksPage(b *testing.B) {
	const locks, page = 10_000, 100
	for _, mode := range []string{"session", "perlock"} {
		f := startBenchFleet(b)
		f.fill(b, locks, mode == "perlock")
		ctx := context.Background()
		b.Run("gateway-"+mode, func(b *testing.B) {
			tok, listed := "", 0
			defer func() { b.ReportMetric(float64(listed)/float64(b.N), "locks/op") }()
			for b.Loop() {
				resp, err := f.g.Client.ListLocks(ctx, connect.NewRequest(&v1.ListLocksRequest{Prefix: "bench/", PageSize: page, PageToken: tok}))
				if err != nil {
					b.Fatal(err)
				}
				if len(resp.Msg.Locks) == 0 {
					b.Fatal("empty page")
				}
				listed += len(resp.Msg.Locks)
				tok = resp.Msg.NextPageToken
			}
		})
		if mode != "session" {
			continue
		}
		from := queue.LocksPrefix(f.g.Prefix)
		end := clientv3.GetPrefixRangeEnd(from)
		b.Run("etcd-range-1shard", func(b *testing.B) {
			start := from
			for b.Loop() {
				resp, err := f.etcd["c0"].Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(page))
				if err != nil {
					b.Fatal(err)
				}
				start = from
				if resp.More {
					start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
				}
			}
		})
		b.Run("etcd-range-3shards", func(b *testing.B) {
			starts := map[string]string{"c0": from, "c1": from, "c2": from}
			var mu sync.Mutex
			for b.Loop() {
				var wg sync.WaitGroup
				for shard, cli := range f.etcd {
					wg.Go(func() {
						mu.Lock()
						start := starts[shard]
						mu.Unlock()
						resp, err := cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(page))
						if err != nil {
							b.Error(err)
							return
						}
						next := from
						if resp.More {
							next = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
						}
						mu.Lock()
						starts[shard] = next
						mu.Unlock()
					})
				}
				wg.Wait()
			}
		})
	}
}

// BenchmarkWatchEvents measures lock events delivered per second by one
// gateway's Watch stream (one op = one event at the client), beside raw
// etcd watches of the same keys on the three shards. The events are
// written before the timer starts — lock keys created and deleted
// directly in etcd, 100 per transaction, over the three shards: every put
// a held event, every delete an expired one — and both watchers then
// catch up from the revision before them, so the figure is the watcher's
// delivery rate, not etcd's write rate. The gateway resumes from a token;
// etcd's watches start at the same revisions.
//
//	go test ./gateway -run '^$' -bench WatchEvents -benchtime=200000x
func BenchmarkWatchEvents(b *testing.B) {
	f := startBenchFleet(b)
	ctx := context.Background()
	shards := []string{"c0", "c1", "c2"}
	// write writes at least n events, and returns each shard's revision
	// before them.
	write := func(n int) map[string]int64 {
		before := map[string]int64{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for si, shard := range shards {
			cli := f.etcd[shard]
			wg.Go(func() {
				resp, err := cli.Get(ctx, "rev")
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				before[shard] = resp.Header.Revision
				mu.Unlock()
				val := f.lockValue("w")
				for done := 0; done < n/len(shards)+1; done += 200 {
					var puts, dels []clientv3.Op
					for i := range 100 {
						key := queue.NamePrefix(f.g.Prefix, fmt.Sprintf("w/%d-%d", si, i)) + "k"
						puts = append(puts, clientv3.OpPut(key, val))
						dels = append(dels, clientv3.OpDelete(key))
					}
					if _, err := cli.Txn(ctx).Then(puts...).Commit(); err != nil {
						b.Error(err)
						return
					}
					if _, err := cli.Txn(ctx).Then(dels...).Commit(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return before
	}
	b.Run("gateway", func(b *testing.B) {
		// A resume token from before the writes.
		wctx, cancel := context.WithCancel(ctx)
		s, err := f.g.Client.Watch(wctx, connect.NewRequest(&v1.WatchRequest{Prefix: "w/"}))
		if err != nil {
			b.Fatal(err)
		}
		tok := ""
		for ends := 0; ends < 3 && s.Receive(); {
			if s.Msg().Kind == v1.WatchMessageKind_WATCH_MESSAGE_KIND_SNAPSHOT_END {
				ends++
				tok = s.Msg().ResumeToken
			}
		}
		cancel()
		s.Close()
		write(b.N)
		b.ResetTimer()
		wctx, cancel = context.WithCancel(ctx)
		defer cancel()
		s, err = f.g.Client.Watch(wctx, connect.NewRequest(&v1.WatchRequest{Prefix: "w/", ResumeToken: tok}))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		n := 0
		for n < b.N && s.Receive() {
			n += len(s.Msg().Events)
		}
		b.StopTimer()
		if n < b.N {
			b.Fatalf("stream ended after %d events: %v", n, s.Err())
		}
	})
	b.Run("etcd-watch", func(b *testing.B) {
		before := write(b.N)
		b.ResetTimer()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		from := queue.LocksPrefix(f.g.Prefix)
		events := make(chan int, 1024)
		for _, shard := range shards {
			wch := f.etcd[shard].Watch(wctx, from, clientv3.WithPrefix(), clientv3.WithRev(before[shard]+1))
			go func() {
				for wr := range wch {
					select {
					case events <- len(wr.Events):
					case <-wctx.Done():
						return
					}
				}
			}()
		}
		n := 0
		for n < b.N {
			n += <-events
		}
		b.StopTimer()
	})
}
