package gateway_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/queue"
)

// threeShards starts three etcd clusters and a gateway over them.
func threeShards(t *testing.T) (*fleet, *gw) {
	t.Helper()
	f := startFleet(t, 3)
	return f, f.gateway(t, nil, 0, 1, 2)
}

// etcdOf is a client of the cluster called shard ("c0" …).
func (f *fleet) etcdOf(t *testing.T, shard string) *clientv3.Client {
	var i int
	if _, err := fmt.Sscanf(shard, "c%d", &i); err != nil {
		t.Fatalf("shard %q", shard)
	}
	return f.etcds[i].ClientFor(t)
}

func try(t *testing.T, g *gw, name, client string) *v1.Granted {
	t.Helper()
	resp, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 30000, ClientId: client}))
	if err != nil || !resp.Msg.Acquired {
		t.Fatalf("TryAcquire(%q) = %v, %v; want acquired", name, resp, err)
	}
	return resp.Msg.Granted
}

// listAll walks every page of ListLocks under prefix and returns the names
// in the order listed, calling between(i) before page i > 0.
func listAll(t *testing.T, g *gw, prefix string, size int32, between func(int)) []*v1.LockSummary {
	t.Helper()
	var out []*v1.LockSummary
	tok := ""
	for i := 0; ; i++ {
		if i > 0 && between != nil {
			between(i)
		}
		resp, err := g.Client.ListLocks(ctxT(t), connect.NewRequest(&v1.ListLocksRequest{Prefix: prefix, PageSize: size, PageToken: tok}))
		if err != nil {
			t.Fatalf("ListLocks page %d: %v", i, err)
		}
		if len(resp.Msg.Locks) > int(size) {
			t.Fatalf("page %d has %d locks; page size %d", i, len(resp.Msg.Locks), size)
		}
		out = append(out, resp.Msg.Locks...)
		if tok = resp.Msg.NextPageToken; tok == "" {
			return out
		}
		if i > 1000 {
			t.Fatal("ListLocks does not end")
		}
	}
}

func TestListLocksPagesEveryLockOnceAcrossShards(t *testing.T) {
	_, g := threeShards(t)
	want := map[string]int64{} // name → token
	shards := map[string]bool{}
	for i := range 40 {
		name := fmt.Sprintf("ls/%02d", i)
		gr := try(t, g, name, "c-"+name)
		want[name] = gr.FencingToken
		shards[gr.Shard] = true
	}
	// Names that sort around the prefix's and escape differently.
	for _, n := range []string{"ls-x", "ls.y", "lr/z", "ls/a b", "ls/%"} {
		gr := try(t, g, n, "c-"+n)
		if strings.HasPrefix(n, "ls/") {
			want[n] = gr.FencingToken
		}
	}
	if len(shards) < 2 {
		t.Fatalf("40 names landed on shards %v; want several", shards)
	}
	// One name with a queue longer than a read batch of the engine.
	long := "ls/long"
	want[long] = try(t, g, long, "c-"+long).FencingToken
	for i := range 70 {
		w := startWaiter(t, g, &v1.AcquireRequest{Name: long, TtlMs: 30000, ClientId: fmt.Sprintf("w%d", i)})
		if p := <-w.positions; p != int64(i+1) {
			t.Fatalf("waiter %d queued at %d", i, p)
		}
		t.Cleanup(w.cancel)
	}
	for _, size := range []int32{1, 3, 7, 100} {
		got := listAll(t, g, "ls/", size, nil)
		var names []string
		for _, l := range got {
			names = append(names, l.Name)
			if tok, ok := want[l.Name]; !ok {
				t.Errorf("size %d: listed %q, which is not under the prefix", size, l.Name)
			} else if len(l.Holders) != 1 || l.Holders[0].FencingToken != tok || l.Holders[0].ClientId != "c-"+l.Name || l.Limit != 1 {
				t.Errorf("size %d: %q listed as %v; want holder c-%s with token %d", size, l.Name, l, l.Name, tok)
			}
			if l.Holders[0].ExpiresAt.AsTime().Before(time.Now()) || l.ShardBreaker != "closed" || l.Shard == "" {
				t.Errorf("size %d: %q: expires %v, breaker %q, shard %q", size, l.Name, l.Holders[0].ExpiresAt.AsTime(), l.ShardBreaker, l.Shard)
			}
			if wantW := int64(0); l.Name == long && l.Waiters != 70 || l.Name != long && l.Waiters != wantW {
				t.Errorf("size %d: %q has %d waiters", size, l.Name, l.Waiters)
			}
		}
		if len(names) != len(want) {
			t.Errorf("size %d: listed %d names; want %d: %v", size, len(names), len(want), names)
		}
		seen := map[string]bool{}
		for i, n := range names {
			if seen[n] {
				t.Errorf("size %d: %q listed twice", size, n)
			}
			seen[n] = true
			if i > 0 && queue.NameCursor(names[i-1])+"/" >= queue.NameCursor(n)+"/" {
				t.Errorf("size %d: %q listed after %q: not in key order", size, n, names[i-1])
			}
		}
	}
	// A token belongs to its prefix.
	resp, err := g.Client.ListLocks(ctxT(t), connect.NewRequest(&v1.ListLocksRequest{Prefix: "ls/", PageSize: 2}))
	if err != nil || resp.Msg.NextPageToken == "" {
		t.Fatalf("ListLocks = %v, %v", resp, err)
	}
	_, err = g.Client.ListLocks(ctxT(t), connect.NewRequest(&v1.ListLocksRequest{Prefix: "lr/", PageToken: resp.Msg.NextPageToken}))
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("ListLocks with another prefix's token = %v; want invalid_argument", err)
	}
}

// Names that exist for the whole walk are listed exactly once, whatever
// is created and deleted between pages.
func TestListLocksWalkUnderChurn(t *testing.T) {
	_, g := threeShards(t)
	stable := map[string]bool{}
	for i := range 30 {
		n := fmt.Sprintf("c/s%02d", i)
		try(t, g, n, "s")
		stable[n] = true
	}
	var mu sync.Mutex
	var churn []*v1.Granted
	got := listAll(t, g, "c/", 4, func(i int) {
		mu.Lock()
		defer mu.Unlock()
		// Before and after the walk's position: new names, and names gone.
		churn = append(churn, try(t, g, fmt.Sprintf("c/n%02d", i), "n"), try(t, g, fmt.Sprintf("c/a%02d", i), "n"))
		if len(churn) > 3 {
			release(t, g, churn[0])
			churn = churn[1:]
		}
	})
	seen := map[string]int{}
	for _, l := range got {
		seen[l.Name]++
	}
	for n, c := range seen {
		if c > 1 {
			t.Errorf("%q listed %d times", n, c)
		}
	}
	for n := range stable {
		if seen[n] != 1 {
			t.Errorf("stable %q listed %d times; want once", n, seen[n])
		}
	}
}

func TestDescribeQueueIsFIFOAndLeaksNoSecret(t *testing.T) {
	_, g := threeShards(t)
	name := "q/orders/42"
	resp, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 30000, ClientId: "holder", RequestId: "rid-holder-0001"}))
	if err != nil || !resp.Msg.Acquired {
		t.Fatal(resp, err)
	}
	held := resp.Msg.Granted
	sess, err := g.Client.OpenSession(ctxT(t), connect.NewRequest(&v1.OpenSessionRequest{ClientId: "sess", TtlMs: 30000}))
	if err != nil {
		t.Fatal(err)
	}
	var rids []string
	for i := range 3 {
		rid := fmt.Sprintf("rid-waiter-%04d", i)
		rids = append(rids, rid)
		req := &v1.AcquireRequest{Name: name, TtlMs: 30000, ClientId: fmt.Sprintf("w%d", i), RequestId: rid}
		if i == 1 {
			req.SessionId = sess.Msg.SessionId
		}
		w := startWaiter(t, g, req)
		t.Cleanup(w.cancel)
		if p := <-w.positions; p != int64(i+1) {
			t.Fatalf("waiter %d queued at %d", i, p)
		}
	}
	d, err := g.Client.DescribeQueue(ctxT(t), connect.NewRequest(&v1.DescribeQueueRequest{Name: name}))
	if err != nil {
		t.Fatal(err)
	}
	m := d.Msg
	if m.Name != name || m.Shard != held.Shard || m.Limit != 1 || len(m.Entries) != 4 || m.Waiters != 3 || m.ShardBreaker != "closed" {
		t.Fatalf("DescribeQueue = %v", m)
	}
	for i, e := range m.Entries {
		wantClient := "holder"
		if i > 0 {
			wantClient = fmt.Sprintf("w%d", i-1)
		}
		if e.ClientId != wantClient || e.Position != int64(i) || e.Holder != (i == 0) || e.Session != (i == 2) {
			t.Errorf("entry %d = %v; want client %s at %d", i, e, wantClient, i)
		}
		if i == 0 && (e.FencingToken != held.FencingToken || e.ExpiresAt == nil) || i > 0 && e.FencingToken != 0 {
			t.Errorf("entry %d: token %d, expires %v", i, e.FencingToken, e.ExpiresAt)
		}
		if e.WaitingSince.AsTime().IsZero() || time.Since(e.WaitingSince.AsTime()) > time.Minute {
			t.Errorf("entry %d waiting since %v", i, e.WaitingSince.AsTime())
		}
		if i > 1 && e.WaitingSince.AsTime().Before(m.Entries[i-1].WaitingSince.AsTime()) {
			t.Errorf("entry %d enqueued before entry %d", i, i-1)
		}
	}
	js, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range append(rids, "rid-holder-0001", held.LockId, sess.Msg.SessionId, queue.WaiterID("rid-holder-0001")) {
		if strings.Contains(string(js), secret) {
			t.Errorf("DescribeQueue's JSON carries %q: %s", secret, js)
		}
	}
	for _, field := range []string{"lockId", "requestId", "secret", "sessionId"} {
		if strings.Contains(string(js), field) {
			t.Errorf("DescribeQueue's JSON has a %s field: %s", field, js)
		}
	}
	// A free name: no entries.
	d, err = g.Client.DescribeQueue(ctxT(t), connect.NewRequest(&v1.DescribeQueueRequest{Name: "q/free"}))
	if err != nil || len(d.Msg.Entries) != 0 {
		t.Errorf("DescribeQueue(free) = %v, %v", d, err)
	}
}

// ---- Watch ----

type watchStream struct {
	msgs   chan *v1.WatchResponse
	cancel context.CancelFunc
	done   chan error
}

func openWatch(t *testing.T, g *gw, prefix, token string) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	s, err := g.Client.Watch(ctx, connect.NewRequest(&v1.WatchRequest{Prefix: prefix, ResumeToken: token}))
	if err != nil {
		t.Fatal(err)
	}
	w := &watchStream{msgs: make(chan *v1.WatchResponse, 1024), cancel: cancel, done: make(chan error, 1)}
	go func() {
		defer close(w.msgs)
		for s.Receive() {
			w.msgs <- s.Msg()
		}
		w.done <- s.Err()
		s.Close()
	}()
	t.Cleanup(cancel)
	return w
}

func (w *watchStream) next(t *testing.T) *v1.WatchResponse {
	t.Helper()
	select {
	case m, ok := <-w.msgs:
		if !ok {
			t.Fatalf("watch ended: %v", <-w.done)
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no watch message in 30 s")
		return nil
	}
}

// snapshot reads the starting snapshot of n shards and returns its
// entries and the token after it.
func (w *watchStream) snapshot(t *testing.T, n int) ([]*v1.LockEvent, string) {
	t.Helper()
	var evs []*v1.LockEvent
	ended := map[string]bool{}
	for len(ended) < n {
		m := w.next(t)
		switch m.Kind {
		case v1.WatchMessageKind_WATCH_MESSAGE_KIND_SNAPSHOT:
			evs = append(evs, m.Events...)
		case v1.WatchMessageKind_WATCH_MESSAGE_KIND_SNAPSHOT_END:
			ended[m.Shards[0]] = true
		case v1.WatchMessageKind_WATCH_MESSAGE_KIND_PROGRESS:
		default:
			t.Fatalf("during the snapshot: %v", m)
		}
		if len(ended) == n {
			return evs, m.ResumeToken
		}
	}
	return evs, ""
}

// events reads EVENTS messages until n events came and returns them with
// the token of the last message.
func (w *watchStream) events(t *testing.T, n int) ([]*v1.LockEvent, string) {
	t.Helper()
	var evs []*v1.LockEvent
	var tok string
	for len(evs) < n {
		m := w.next(t)
		switch m.Kind {
		case v1.WatchMessageKind_WATCH_MESSAGE_KIND_EVENTS:
			evs = append(evs, m.Events...)
		case v1.WatchMessageKind_WATCH_MESSAGE_KIND_PROGRESS:
		default:
			t.Fatalf("want events, got %v", m)
		}
		tok = m.ResumeToken
	}
	return evs, tok
}

// ev is an event as the tests compare it.
type ev struct {
	typ    string
	name   string
	client string
	pos    int64
}

func evOf(e *v1.LockEvent) ev {
	return ev{strings.ToLower(strings.TrimPrefix(e.Type.String(), "LOCK_EVENT_TYPE_")), e.Name, e.ClientId, e.Position}
}

func evsOf(es []*v1.LockEvent) []ev {
	var out []ev
	for _, e := range es {
		out = append(out, evOf(e))
	}
	return out
}

func expectEvents(t *testing.T, what string, got []*v1.LockEvent, want ...ev) {
	t.Helper()
	if g := evsOf(got); !slices.Equal(g, want) {
		t.Fatalf("%s: events\n got %v\nwant %v", what, g, want)
	}
}

// holderLease returns the lease of name's first key on its shard.
func holderLease(t *testing.T, cli *clientv3.Client, prefix, name string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(ctxT(t), queue.NamePrefix(prefix, name), clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("holder key of %q: %v, %v", name, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

func TestWatchReportsEveryChangeAndResumes(t *testing.T) {
	f, g := threeShards(t)
	a := try(t, g, "w/a", "A")
	try(t, g, "x/outside", "X")
	w := openWatch(t, g, "w/", "")
	snap, _ := w.snapshot(t, 3)
	expectEvents(t, "snapshot", snap, ev{"held", "w/a", "A", 0})
	if snap[0].FencingToken != a.FencingToken || snap[0].Shard != a.Shard {
		t.Fatalf("snapshot entry %v; want token %d on %s", snap[0], a.FencingToken, a.Shard)
	}

	b := startWaiter(t, g, &v1.AcquireRequest{Name: "w/a", TtlMs: 30000, ClientId: "B"})
	<-b.positions
	got, _ := w.events(t, 1)
	expectEvents(t, "B enqueues", got, ev{"queued", "w/a", "B", 1})
	c := startWaiter(t, g, &v1.AcquireRequest{Name: "w/a", TtlMs: 30000, ClientId: "C"})
	<-c.positions
	got, _ = w.events(t, 1)
	expectEvents(t, "C enqueues", got, ev{"queued", "w/a", "C", 2})
	c.cancel()
	got, _ = w.events(t, 1)
	expectEvents(t, "C leaves", got, ev{"left", "w/a", "C", 2})
	release(t, g, a)
	bg := <-b.granted
	got, tok := w.events(t, 2)
	expectEvents(t, "A releases", got, ev{"released", "w/a", "A", 0}, ev{"held", "w/a", "B", 0})
	if got[0].FencingToken != a.FencingToken || got[1].FencingToken != bg.FencingToken {
		t.Fatalf("tokens %d, %d; want %d, %d", got[0].FencingToken, got[1].FencingToken, a.FencingToken, bg.FencingToken)
	}

	// Cut the stream; changes happen while nobody watches.
	w.cancel()
	etcdA := f.etcdOf(t, a.Shard)
	if _, err := etcdA.Revoke(ctxT(t), holderLease(t, etcdA, g.Prefix, "w/a")); err != nil {
		t.Fatal(err)
	}
	d := try(t, g, "w/d", "D")
	// Resume: exactly the changes after the token, nothing before it.
	w2 := openWatch(t, g, "w/", tok)
	got, tok2 := w2.events(t, 2)
	slices.SortFunc(got, func(x, y *v1.LockEvent) int { return strings.Compare(x.Name, y.Name) })
	expectEvents(t, "resumed", got, ev{"expired", "w/a", "B", 0}, ev{"held", "w/d", "D", 0})
	if got[0].FencingToken != bg.FencingToken {
		t.Fatalf("expired token %d; want %d", got[0].FencingToken, bg.FencingToken)
	}
	release(t, g, d)
	got, tok2 = w2.events(t, 1)
	expectEvents(t, "D releases", got, ev{"released", "w/d", "D", 0})
	w2.cancel()

	// History compacted behind the token: the shard resyncs.
	e := try(t, g, "w/d", "E")
	etcdD := f.etcdOf(t, e.Shard)
	st, err := etcdD.Get(ctxT(t), "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcdD.Compact(ctxT(t), st.Header.Revision); err != nil {
		t.Fatal(err)
	}
	w3 := openWatch(t, g, "w/", tok2)
	m := w3.next(t)
	if m.Kind != v1.WatchMessageKind_WATCH_MESSAGE_KIND_RESYNC || !slices.Equal(m.Shards, []string{e.Shard}) {
		t.Fatalf("after a compaction: %v; want RESYNC of %s", m, e.Shard)
	}
	snap, _ = w3.snapshot(t, 1)
	expectEvents(t, "resync snapshot", snap, ev{"held", "w/d", "E", 0})
}

func TestWatchTellsForceReleaseFromRelease(t *testing.T) {
	_, g := threeShards(t)
	w := openWatch(t, g, "", "")
	w.snapshot(t, 3)
	h := try(t, g, "f/a", "H")
	got, _ := w.events(t, 1)
	expectEvents(t, "held", got, ev{"held", "f/a", "H", 0})
	admin := leasegatev1connect.NewAdminServiceClient(g.HTTP, g.URL) // loopback, no auth: admin
	if _, err := admin.ForceRelease(ctxT(t), connect.NewRequest(&v1.ForceReleaseRequest{Name: "f/a", Reason: "stuck"})); err != nil {
		t.Fatal(err)
	}
	got, _ = w.events(t, 1)
	expectEvents(t, "forced", got, ev{"force_released", "f/a", "H", 0})
	if got[0].FencingToken != h.FencingToken {
		t.Fatalf("token %d; want %d", got[0].FencingToken, h.FencingToken)
	}
}

// Pages and queues are cut to fit the gateway's message size cap; the walk
// still lists every lock once, and the queue still counts every waiter.
func TestAnswersFitTheMessageCap(t *testing.T) {
	g := startGatewayWith(t, func(c *server.Config) { c.Gateway.MaxBodyBytes = 2048 })
	for i := range 30 {
		try(t, g, fmt.Sprintf("cap/%s-%02d", strings.Repeat("x", 60), i), strings.Repeat("c", 100))
	}
	got := listAll(t, g, "cap/", 100, nil)
	if len(got) != 30 {
		t.Fatalf("listed %d locks; want 30", len(got))
	}
	resp, err := g.Client.ListLocks(ctxT(t), connect.NewRequest(&v1.ListLocksRequest{Prefix: "cap/", PageSize: 100}))
	if err != nil || len(resp.Msg.Locks) >= 30 || resp.Msg.NextPageToken == "" || proto.Size(resp.Msg) > 2048 {
		t.Fatalf("first page: %d locks, %d bytes, token %q, %v", len(resp.Msg.Locks), proto.Size(resp.Msg), resp.Msg.NextPageToken, err)
	}
	name := "cap/q"
	try(t, g, name, "h")
	for i := range 20 {
		w := startWaiter(t, g, &v1.AcquireRequest{Name: name, TtlMs: 30000, ClientId: fmt.Sprintf("%0100d", i)})
		t.Cleanup(w.cancel)
		<-w.positions
	}
	d, err := g.Client.DescribeQueue(ctxT(t), connect.NewRequest(&v1.DescribeQueueRequest{Name: name}))
	if err != nil || d.Msg.Waiters != 20 || len(d.Msg.Entries) >= 21 || len(d.Msg.Entries) == 0 || d.Msg.Entries[0].ClientId != "h" {
		t.Fatalf("DescribeQueue of 21 keys under a 2 KiB cap: %d entries, %d waiters, %v", len(d.Msg.Entries), d.Msg.Waiters, err)
	}
}
