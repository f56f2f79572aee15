package gateway_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// connectStream posts one Connect server-stream request and returns the
// response as soon as its headers arrive.
func connectStream(ctx context.Context, g *gw, path string, req proto.Message) (*http.Response, error) {
	msg, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	body := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/connect+proto")
	hr.Header.Set("Connect-Protocol-Version", "1")
	return g.HTTP.Do(hr)
}

// A resumed Watch on which nothing happens answers with its headers at
// once, so its client knows the watch is open; the first message may be
// a while (the gateway's clock is stopped here: no PROGRESS either).
func TestResumedQuietWatchAnswersAtOnce(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared, gwtest.Clock(clock.NewFake(time.Now())))
	w := openWatch(t, g, "quiet/", "")
	_, tok := w.snapshot(t, 1)
	w.cancel()
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	resp, err := connectStream(ctx, g, "/leasegate.v1.LockService/Watch", &v1.WatchRequest{Prefix: "quiet/", ResumeToken: tok})
	if err != nil {
		t.Fatalf("a resumed watch with nothing to send: no response headers within 5 s: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// A quiet watch sends PROGRESS every 5 s of the gateway's clock, each
// message within the send timeout: a client that stopped reading is
// dropped, and its stream's place under the tenant's cap freed, even
// when nothing happens under its prefix (the stalled watch here resumes
// from a token, so it has no snapshot to be caught sending), while a
// client that reads gets its PROGRESS.
func TestStalledQuietWatchIsDropped(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	g := gwtest.Start(t, shared, gwtest.Clock(clk), gwtest.Configure(func(c *server.Config) {
		c.Gateway.SendTimeout = time.Second
		c.Gateway.Limits.MaxWaitersPerTenant = 2
	}))
	// probe opens a watch and reports how it went once it is open (its
	// snapshot came) or refused.
	probe := func() error {
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		s, err := g.Client.Watch(ctx, connect.NewRequest(&v1.WatchRequest{Prefix: "still/"}))
		if err != nil {
			return err
		}
		defer s.Close()
		if s.Receive() {
			return nil
		}
		return s.Err()
	}
	reader := openWatch(t, g, "still/", "") // the tenant's first place, for the whole test
	_, tok := reader.snapshot(t, 1)
	headers, reset := stalledStream(t, g.Addr, "/leasegate.v1.LockService/Watch", &v1.WatchRequest{Prefix: "still/", ResumeToken: tok})
	select {
	case <-headers:
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled watch got no response headers")
	}
	if err := probe(); codeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a third watch: %v; want it refused (the reader and the stalled watch have the tenant's places)", err)
	}
	// Time passes on the quiet prefix: the reader gets PROGRESS, the
	// stalled watch cannot take its own within the send timeout.
	start := time.Now()
	for dropped, progressed := false, false; !dropped || !progressed; {
		clk.Advance(5 * time.Second)
		select {
		case <-reset:
			dropped = true
		case m := <-reader.msgs:
			if m == nil || m.Kind != v1.WatchMessageKind_WATCH_MESSAGE_KIND_PROGRESS || m.ResumeToken == "" {
				t.Fatalf("the reader of a quiet prefix got %v; want PROGRESS with a token", m)
			}
			progressed = true
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("after 10 s of quiet: the stalled watch dropped %v, the reader's PROGRESS %v", dropped, progressed)
		}
	}
	t.Logf("the stalled quiet watch was dropped %s after time began to pass (send timeout 1 s)", time.Since(start).Round(10*time.Millisecond))
	// Its place is free again.
	for err := probe(); err != nil; err = probe() {
		if codeOf(err) != connect.CodeResourceExhausted || time.Since(start) > 15*time.Second {
			t.Fatalf("a watch after the stalled one was dropped: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A watch whose prefix covers more keys than the tenant's watches may
// follow is refused with resource_exhausted, QUOTA_EXCEEDED, naming the
// limit and the shard; a narrower prefix is watched.
func TestWatchPastTheKeyBudgetIsRefused(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, func(c *server.Config) { c.Fleet.Queue.MaxWatchKeys = 5 })
	for i := range 6 {
		tryAcquire(t, g, "big/"+string(rune('a'+i)))
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	s, err := g.Client.Watch(ctx, connect.NewRequest(&v1.WatchRequest{Prefix: "big/"}))
	if err != nil {
		t.Fatal(err)
	}
	for s.Receive() {
		if s.Msg().Kind == v1.WatchMessageKind_WATCH_MESSAGE_KIND_SNAPSHOT_END {
			t.Fatal("a watch of 6 keys over a budget of 5 got its snapshot")
		}
	}
	err = s.Err()
	var ce *connect.Error
	if codeOf(err) != connect.CodeResourceExhausted || reasonOf(err) != "QUOTA_EXCEEDED" || !errors.As(err, &ce) {
		t.Fatalf("watch past the budget: %v (reason %q); want resource_exhausted, QUOTA_EXCEEDED", err, reasonOf(err))
	}
	var limit string
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				limit = info.Metadata["limit"]
			}
		}
	}
	if limit != "tenant_watch_keys" || !strings.Contains(ce.Message(), "narrower prefix") {
		t.Fatalf("the refusal names limit %q, says %q; want tenant_watch_keys and what to do", limit, ce.Message())
	}
	w := openWatch(t, g, "big/a", "")
	if evs, _ := w.snapshot(t, 1); len(evs) != 1 {
		t.Fatalf("a narrower prefix: snapshot %v", evs)
	}
}

// Every view numbers a queue as the waiter's own Acquire stream does — a
// semaphore's next waiter is position 1 in its stream, DescribeQueue,
// ListLocks' waiter count and Watch — and lists an election under its
// own name with kind ELECTION, never as a lock named with a control
// character.
func TestViewsNumberAndNameAsTheStreamDoes(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	w := openWatch(t, g, "", "")
	w.snapshot(t, 1)
	for _, c := range []string{"h1", "h2"} {
		resp, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "sem", TtlMs: 30000, ClientId: c, Limit: 2}))
		if err != nil || !resp.Msg.Acquired {
			t.Fatalf("TryAcquire(sem, limit 2) = %v, %v", resp, err)
		}
	}
	wt := startWaiter(t, g, &v1.AcquireRequest{Name: "sem", TtlMs: 30000, ClientId: "next", Limit: 2})
	streamPos := <-wt.positions
	got, _ := w.events(t, 3)
	expectEvents(t, "the semaphore's holders and its waiter", got, ev{"held", "sem", "h1", 0}, ev{"held", "sem", "h2", 0}, ev{"queued", "sem", "next", streamPos})
	q, err := g.Client.DescribeQueue(ctxT(t), connect.NewRequest(&v1.DescribeQueueRequest{Name: "sem"}))
	if err != nil {
		t.Fatal(err)
	}
	var pos []int64
	for _, e := range q.Msg.Entries {
		pos = append(pos, e.Position)
	}
	if streamPos != 1 || len(pos) != 3 || pos[0] != 0 || pos[1] != 0 || pos[2] != streamPos || q.Msg.Waiters != 1 || q.Msg.Kind != v1.LockKind_LOCK_KIND_LOCK {
		t.Fatalf("the stream says position %d; DescribeQueue says %v, %d waiters, kind %v", streamPos, pos, q.Msg.Waiters, q.Msg.Kind)
	}

	ec := electionClient(g)
	campaign(t, ec, &v1.CampaignRequest{Name: "sem", Value: []byte("v"), TtlMs: 30000, ClientId: "leader"})
	got, _ = w.events(t, 1)
	if got[0].Name != "sem" || got[0].Kind != v1.LockKind_LOCK_KIND_ELECTION || got[0].Type != v1.LockEventType_LOCK_EVENT_TYPE_HELD {
		t.Fatalf("the campaign watched as %v; want election sem held", got[0])
	}
	list, err := g.Client.ListLocks(ctxT(t), connect.NewRequest(&v1.ListLocksRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, l := range list.Msg.Locks {
		if strings.ContainsFunc(l.Name, func(r rune) bool { return r < 0x20 }) {
			t.Errorf("ListLocks names %q", l.Name)
		}
		listed = append(listed, l.Kind.String()+" "+l.Name)
	}
	if want := "[LOCK_KIND_ELECTION sem LOCK_KIND_LOCK sem]"; fmtList(listed) != want {
		t.Fatalf("ListLocks lists %v; want %s", listed, want)
	}
	eq, err := g.Client.DescribeQueue(ctxT(t), connect.NewRequest(&v1.DescribeQueueRequest{Name: "sem", Kind: v1.LockKind_LOCK_KIND_ELECTION}))
	if err != nil || eq.Msg.Kind != v1.LockKind_LOCK_KIND_ELECTION || len(eq.Msg.Entries) != 1 || eq.Msg.Entries[0].ClientId != "leader" || !eq.Msg.Entries[0].Holder {
		t.Fatalf("DescribeQueue of election sem: %v, %v", eq, err)
	}
	_, err = g.Client.DescribeQueue(ctxT(t), connect.NewRequest(&v1.DescribeQueueRequest{Name: "sem", Kind: 7}))
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("DescribeQueue with kind 7: %v; want invalid_argument", err)
	}
}

func fmtList(s []string) string { return "[" + strings.Join(s, " ") + "]" }
