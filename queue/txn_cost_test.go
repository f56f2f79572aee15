package queue

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// The cost of one lock operation, as etcd sees it.
//
// costMeter sits in the etcd client's gRPC stack (an interceptor inside
// clientv3's retry loop, so every attempt is counted) and sizes every
// message as protobuf marshals it — without gRPC's 5-byte framing and
// HTTP/2 headers. A unary call is charged to the operation whose context
// carries its label (costLabel): on the operation's path, or in a
// background task it spawned (the engine's hooks tag the task's context).
// Stream messages (keepalives, watch events) carry no caller context: they
// are charged to the window the test has open.

type costLabel struct{}

type costSpawned struct{}

// costRow is what one operation cost.
type costRow struct {
	name string
	// path: unary calls on the caller's path, by method; spawned: unary
	// calls of background tasks the operation started, by task.
	path, spawned map[string]int
	txns          int // Txn calls on the path
	cmps, ops     int // compares and operations of those Txns, every level and branch
	nested        int // nested transactions among ops
	depthOps      int // the largest sum over a nesting path of max(compares, then, else): what --max-txn-ops bounds
	reqB, respB   int // path calls' marshalled request and response bytes
	spawnedB      int // spawned calls' request + response bytes
	kaSends       int // LeaseKeepAlive requests sent in the window
	kaB           int // their request + response bytes
	watchB        int // Watch stream bytes in the window (creates and events)
	took          time.Duration
}

type costMeter struct {
	mu     sync.Mutex
	rows   map[string]*costRow
	order  []string
	window *costRow
	// running counts the background tasks (but hubs) in flight; idle is
	// closed and replaced whenever it drops.
	running int
	idle    chan struct{}
	// hubParked is signalled when a hub has built its view and waits
	// for events.
	hubParked chan struct{}
}

func newCostMeter() *costMeter {
	return &costMeter{rows: map[string]*costRow{}, idle: make(chan struct{}), hubParked: make(chan struct{}, 1)}
}

func (m *costMeter) rowLocked(name string) *costRow {
	r := m.rows[name]
	if r == nil {
		r = &costRow{name: name, path: map[string]int{}, spawned: map[string]int{}}
		m.rows[name] = r
		m.order = append(m.order, name)
	}
	return r
}

func methodName(full string) string { return full[strings.LastIndexByte(full, '/')+1:] }

func msgSize(v any) int {
	if p, ok := v.(proto.Message); ok {
		return proto.Size(p)
	}
	return 0
}

// txnShape adds t's compares, operations and nested transactions to r,
// and returns the deepest sum of per-level widths below and at t
// (etcd's checkTxnRequest charges each level max(compares, then, else)
// against what the levels above left of --max-txn-ops).
func txnShape(r *costRow, t *pb.TxnRequest) int {
	width := max(len(t.Compare), len(t.Success), len(t.Failure))
	r.cmps += len(t.Compare)
	below := 0
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		r.ops += len(ops)
		for _, op := range ops {
			if nt := op.GetRequestTxn(); nt != nil {
				r.nested++
				below = max(below, txnShape(r, nt))
			}
		}
	}
	return width + below
}

func (m *costMeter) unary(ctx context.Context, method string, req, reply any, took time.Duration) {
	label, _ := ctx.Value(costLabel{}).(string)
	if label == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rowLocked(label)
	if task, ok := ctx.Value(costSpawned{}).(string); ok {
		r.spawned[task+":"+method]++
		r.spawnedB += msgSize(req) + msgSize(reply)
		return
	}
	r.path[method]++
	r.reqB += msgSize(req)
	r.respB += msgSize(reply)
	r.took += took
	if t, ok := req.(*pb.TxnRequest); ok {
		r.txns++
		r.depthOps = max(r.depthOps, txnShape(r, t))
	}
}

func (m *costMeter) stream(method string, msg any, sent bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.window
	if w == nil {
		return
	}
	switch method {
	case "LeaseKeepAlive":
		if sent {
			w.kaSends++
		}
		w.kaB += msgSize(msg)
	case "Watch":
		w.watchB += msgSize(msg)
	}
}

// open starts charging stream messages to name's row.
func (m *costMeter) open(name string) {
	m.mu.Lock()
	m.window = m.rowLocked(name)
	m.mu.Unlock()
}

// settle waits for the background tasks the operations started, then
// closes the window.
func (m *costMeter) settle(t *testing.T) {
	t.Helper()
	ctx := testCtx(t)
	for {
		m.mu.Lock()
		n, idle := m.running, m.idle
		m.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-idle:
		case <-ctx.Done():
			t.Fatal("background tasks did not end")
		}
	}
	m.mu.Lock()
	m.window = nil
	m.mu.Unlock()
}

func (m *costMeter) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			start := time.Now()
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil {
				m.unary(ctx, methodName(method), req, reply, time.Since(start))
			}
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &meteredStream{ClientStream: cs, m: m, method: methodName(method)}, nil
		}),
	}
}

type meteredStream struct {
	grpc.ClientStream
	m      *costMeter
	method string
}

func (s *meteredStream) SendMsg(msg any) error {
	err := s.ClientStream.SendMsg(msg)
	if err == nil {
		s.m.stream(s.method, msg, true)
	}
	return err
}

func (s *meteredStream) RecvMsg(msg any) error {
	err := s.ClientStream.RecvMsg(msg)
	if err == nil {
		s.m.stream(s.method, msg, false)
	}
	return err
}

// costHooks tags the context of every background task with its name and
// counts the tasks in flight (hubs live as long as their waiters and are
// not counted); the engine's other hooks do nothing.
type costHooks struct{ m *costMeter }

func (h costHooks) at(context.Context, string) {}
func (h costHooks) spawn(ctx context.Context, task string) context.Context {
	if task != "hub" {
		h.m.mu.Lock()
		h.m.running++
		h.m.mu.Unlock()
	}
	return context.WithValue(ctx, costSpawned{}, task)
}
func (h costHooks) end(ctx context.Context) {
	if ctx.Value(costSpawned{}) == "hub" {
		return
	}
	h.m.mu.Lock()
	h.m.running--
	close(h.m.idle)
	h.m.idle = make(chan struct{})
	h.m.mu.Unlock()
}
func (h costHooks) park(ctx context.Context, p parked) {
	if p.hub {
		select {
		case h.m.hubParked <- struct{}{}:
		default:
		}
	}
}
func (h costHooks) unpark(context.Context)                                 {}
func (h costHooks) lease(context.Context, string, clientv3.LeaseID, int64) {}
func (h costHooks) granted(context.Context, Grant, int64, int64)           {}

// drain empties c of a signal sent before the wait that reads it next.
func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// labelled is ctx with the label its calls are charged to.
func labelled(ctx context.Context, label string) context.Context {
	return context.WithValue(ctx, costLabel{}, label)
}

// counts renders calls by name, sorted.
func counts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// newMeteredEngine is an engine whose etcd client reports to a meter of
// its own, in a space of its own.
func newMeteredEngine(t *testing.T, adjust ...func(*Config)) (*Engine, *costMeter) {
	t.Helper()
	m := newCostMeter()
	cli, err := clientv3.New(clientv3.Config{Endpoints: shared.ClientFor(t).Endpoints(), DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), DialOptions: m.options()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	plain, _ := newEngine(t, adjust...)
	e, err := New(cli, plain.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	e.hooks = costHooks{m}
	return e, m
}

// table renders the rows in the order they were first charged.
func (m *costMeter) table(names ...string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "operation\tcalls on path\tTxn cmp/ops/nested\tdepth\treq B\tresp B\tkeepalive sends (B)\twatch B\tspawned (B)")
	for _, name := range names {
		r := m.rows[name]
		if r == nil {
			continue
		}
		shape := "-"
		if r.txns > 0 {
			shape = fmt.Sprintf("%d/%d/%d", r.cmps, r.ops, r.nested)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d (%d)\t%d\t%s (%d)\n", r.name, counts(r.path), shape, r.depthOps,
			r.reqB, r.respB, r.kaSends, r.kaB, r.watchB, counts(r.spawned), r.spawnedB)
	}
	tw.Flush()
	return b.String()
}

// TestTxnCostTable measures, for each kind of lock operation, what it
// costs etcd: the calls on the caller's path (round trips; a pooled
// acquire's keepalive runs beside its transaction), the shape of their
// transactions, the bytes each way, the keepalives and watch traffic of its
// window, and the calls of the background tasks it started. The table is
// logged (run with -run TestTxnCostTable -v). It checks the costs the
// package documents: an uncontested acquire is one transaction on top of
// the lease, a renewal a proof and a keepalive, a release one transaction.
func TestTxnCostTable(t *testing.T) {
	if testing.Short() {
		t.Skip("measures against etcd")
	}
	quiet := func(c *Config) { c.AttemptTTL = 5 * time.Minute } // no attempt-lease renewal inside a window
	e, m := newMeteredEngine(t, quiet)
	e0, m0 := newMeteredEngine(t, quiet, func(c *Config) { c.LeasePool = 0 })
	ctx := testCtx(t)
	lockReq := func(name string) AcquireRequest {
		r := req(name)
		r.TTL = time.Minute // no waiter's renewal tick inside a window
		return r
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	measure := func(m *costMeter, name string, f func(ctx context.Context)) {
		t.Helper()
		names = append(names, name)
		m.open(name)
		f(labelled(ctx, name))
		m.settle(t)
	}
	// Warm the lease pool's class of the TTL (its first take misses and
	// starts the pass that fills it).
	mustRelease(t, e, mustAcquire(t, e, lockReq("warm")))
	m.settle(t)

	var g Grant
	var err error
	measure(m, "acquire: lock, own lease, pool hit", func(ctx context.Context) { g, err = acquire(ctx, e, lockReq("a")); must(err) })
	measure(m, "renew", func(ctx context.Context) { _, err := e.Renew(ctx, g.Handle, g.Token()); must(err) })
	measure(m, "release", func(ctx context.Context) { _, err := e.Release(ctx, g.Handle, g.Token()); must(err) })
	measure(m0, "acquire: lock, own lease, no pool", func(ctx context.Context) { g, err = acquire(ctx, e0, lockReq("a")); must(err) })
	measure(m0, "release: no pool", func(ctx context.Context) { _, err := e0.Release(ctx, g.Handle, g.Token()); must(err) })

	var tg TryResult
	measure(m, "TryAcquire: free", func(ctx context.Context) {
		tg, err = e.TryAcquire(ctx, lockReq("t"))
		must(err)
		if !tg.Acquired {
			t.Fatal("TryAcquire of a free name was refused")
		}
	})
	measure(m, "TryAcquire: held", func(ctx context.Context) {
		res, err := e.TryAcquire(ctx, lockReq("t"))
		must(err)
		if res.Acquired {
			t.Fatal("TryAcquire of a held name was granted")
		}
	})
	mustRelease(t, e, tg.Grant)

	semReq := func() AcquireRequest {
		r := lockReq("s")
		r.Limit = 3
		return r
	}
	measure(m, "acquire: semaphore of 3, free", func(ctx context.Context) { _, err := acquire(ctx, e, semReq()); must(err) })
	measure(m, "acquire: semaphore of 3, 1 holder", func(ctx context.Context) { _, err := acquire(ctx, e, semReq()); must(err) })

	var s Session
	measure(m, "session: open", func(ctx context.Context) { s, err = e.OpenSession(ctx, "c", time.Minute); must(err) })
	measure(m, "session: keepalive", func(ctx context.Context) { _, err := e.KeepAliveSession(ctx, s.Lease, s.Secret); must(err) })
	sessReq := func(name string) AcquireRequest {
		r := lockReq(name)
		r.Session, r.SessionSecret = s.Lease, s.Secret
		return r
	}
	measure(m, "acquire: session, first on the engine", func(ctx context.Context) { g, err = acquire(ctx, e, sessReq("sa")); must(err) })
	measure(m, "release: session lock", func(ctx context.Context) { _, err := e.Release(ctx, g.Handle, g.Token()); must(err) })
	measure(m, "acquire: session", func(ctx context.Context) { g, err = acquire(ctx, e, sessReq("sb")); must(err) })
	mustRelease(t, e, g)

	// A waiter behind a holder: its enqueue, then its wait (the hub's
	// watch and view) and grant once the holder releases.
	holder := mustAcquire(t, e, lockReq("c"))
	var w *Waiter
	measure(m, "enqueue: contended (1 holder)", func(ctx context.Context) { w, err = e.Enqueue(ctx, lockReq("c")); must(err) })
	const waitRow = "wait + grant of a waiter"
	names = append(names, waitRow)
	m.open(waitRow)
	drain(m.hubParked)
	granted := make(chan error, 1)
	go func() {
		g, err := w.Wait(labelled(ctx, waitRow))
		if err == nil {
			_, err = e.Release(ctx, g.Handle, g.Token())
		}
		granted <- err
	}()
	<-m.hubParked
	names = append(names, "release: holder with a waiter")
	if _, err := e.Release(labelled(ctx, "release: holder with a waiter"), holder.Handle, holder.Token()); err != nil {
		t.Fatal(err)
	}
	must(<-granted)
	m.settle(t)

	// A waiter that gives up: its cleanup runs in the background.
	holder = mustAcquire(t, e, lockReq("d"))
	w, err = e.Enqueue(ctx, lockReq("d"))
	must(err)
	const giveUp = "wait given up (cleanup)"
	names = append(names, giveUp)
	m.open(giveUp)
	wctx, cancel := context.WithCancel(labelled(ctx, giveUp))
	drain(m.hubParked)
	gaveUp := make(chan error, 1)
	go func() { _, err := w.Wait(wctx); gaveUp <- err }()
	<-m.hubParked
	cancel()
	<-gaveUp
	m.settle(t)
	mustRelease(t, e, holder)

	t.Logf("per operation (proto-marshalled bytes; depth is what --max-txn-ops bounds):\n%s", m.table(names...)+m0.table(names...))
	t.Logf("enqueue transaction time by the keys in its name:\n%s", depthCost(t, e, m, lockReq))

	// What the package documents of these costs.
	for _, c := range []struct {
		row  string
		m    *costMeter
		want string
	}{
		{"acquire: lock, own lease, pool hit", m, "Txn×1"},
		{"acquire: lock, own lease, no pool", m0, "LeaseGrant×1 Txn×1"},
		{"acquire: session", m, "Txn×1"},
		{"renew", m, "Txn×1"},
		{"release", m, "Txn×1"},
		{"enqueue: contended (1 holder)", m, "Txn×1"},
	} {
		if got := counts(c.m.row(c.row).path); got != c.want {
			t.Errorf("%s: calls on the path %s; want %s", c.row, got, c.want)
		}
	}
	if r := m.row("renew"); r.kaSends != 1 {
		t.Errorf("renew: %d keepalives; want 1", r.kaSends)
	}
}

// depthCost times enqueues behind a holder with no and with many other keys
// in the name, and each of the enqueue's reads of the name and its
// "no keys" compare alone: the bytes stay, etcd's work does not (a range
// sorted by create revision reads every key of the range before it keeps
// the first N, etcdserver/txn/range.go rangeLimit; a compare on a range
// reads every key of it, etcdserver/txn/txn.go applyCompare).
func depthCost(t *testing.T, e *Engine, m *costMeter, lockReq func(string) AcquireRequest) string {
	const deep, runs = 2000, 20
	ctx := testCtx(t)
	filler, err := e.cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.cli.Revoke(context.Background(), filler.ID) }) // before the client closes
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "keys in the name\tmean Txn time\treq B/Txn\tresp B/Txn")
	for _, n := range []int{1, deep} {
		name := fmt.Sprintf("depth-%d", n)
		mustAcquire(t, e, lockReq(name))
		// Keys behind the holder, of a waiter's size: the enqueue reads
		// them, and decodes none but the first.
		prefix := e.keys.namePrefix(name)
		for i := 1; i < n; i += 100 {
			var ops []clientv3.Op
			for j := i; j < min(i+100, n); j++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sfill%05d", prefix, j), strings.Repeat("v", 400), clientv3.WithLease(filler.ID)))
			}
			if _, err := e.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
		}
		row := fmt.Sprintf("depth %d", n)
		for range runs {
			if _, err := e.Enqueue(labelled(ctx, row), lockReq(name)); err != nil {
				t.Fatal(err)
			}
		}
		m.settle(t)
		r := m.row(row)
		fmt.Fprintf(tw, "%d\t%v\t%d\t%d\n", n, (r.took / time.Duration(r.txns)).Round(time.Microsecond), r.reqB/r.txns, r.respB/r.txns)
		// Each of the enqueue's reads of the name alone, in a read-only
		// transaction (served without raft: the range's own work shows).
		for _, read := range []struct {
			what string
			op   clientv3.Op
		}{
			{"first key by create revision", clientv3.OpGet(prefix, withFirstN(1)...)},
			{"first key by create revision, keys only", clientv3.OpGet(prefix, append(withFirstN(1), clientv3.WithKeysOnly())...)},
			{"count only", clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())},
		} {
			row := fmt.Sprintf("depth %d: %s", n, read.what)
			for range runs {
				if _, err := e.cli.Txn(labelled(ctx, row)).Then(read.op).Commit(); err != nil {
					t.Fatal(err)
				}
			}
			r := m.row(row)
			fmt.Fprintf(tw, "  read: %s\t%v\t%d\t%d\n", read.what, (r.took / time.Duration(r.txns)).Round(time.Microsecond), r.reqB/r.txns, r.respB/r.txns)
		}
		// The compare "the name has no keys" (acquireTxn's empty) alone:
		// etcd reads the whole range, values too, to compare it
		// (etcdserver/txn/txn.go applyCompare).
		row = fmt.Sprintf("depth %d: compare", n)
		for range runs {
			if _, err := e.cli.Txn(labelled(ctx, row)).If(clientv3.Compare(clientv3.CreateRevision(prefix).WithPrefix(), "=", 0)).Commit(); err != nil {
				t.Fatal(err)
			}
		}
		r = m.row(row)
		fmt.Fprintf(tw, "  compare: the name has no keys\t%v\t%d\t%d\n", (r.took / time.Duration(r.txns)).Round(time.Microsecond), r.reqB/r.txns, r.respB/r.txns)
	}
	tw.Flush()
	return b.String()
}

func (m *costMeter) row(name string) *costRow {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rowLocked(name)
}
