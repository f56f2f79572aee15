package queue

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

var updateTxnGolden = flag.Bool("golden.update", false, "rewrite testdata/enqueue_txns.golden from the code under test")

// txnCapture is a KV client that records the transaction an engine sends
// right after each of its enqueue and takeover points (and grant points,
// when asked), as etcd receives it.
type txnCapture struct {
	pb.KVClient
	mu     sync.Mutex
	armed  bool
	grants bool   // record the transaction after each grant point too
	next   string // the point whose transaction is recorded next
	got    []capturedTxn
}

type capturedTxn struct {
	point string
	req   *pb.TxnRequest
}

func (c *txnCapture) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	c.mu.Lock()
	if c.armed && c.next != "" {
		c.got = append(c.got, capturedTxn{c.next, proto.Clone(in).(*pb.TxnRequest)})
		c.next = ""
	}
	c.mu.Unlock()
	return c.KVClient.Txn(ctx, in, opts...)
}

func (c *txnCapture) point(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p != pointEnqueue && p != pointTakeover && (p != pointGrant || !c.grants) {
		return
	}
	c.next = p
}

// run records the transactions of f (with grants, those after its grant
// points too), and returns them normalized.
func (c *txnCapture) run(n *txnNormalizer, grants bool, f func()) string {
	c.mu.Lock()
	c.armed, c.grants, c.got, c.next = true, grants, nil, ""
	c.mu.Unlock()
	f()
	c.mu.Lock()
	got := c.got
	c.armed, c.grants = false, false
	c.mu.Unlock()
	var b strings.Builder
	for _, t := range got {
		b.WriteString(n.txn(t.point, t.req))
	}
	return b.String()
}

// txnNormalizer renders a transaction with what differs from run to run
// (the space, lease ids, revisions, secrets, nonces, clock readings)
// replaced by names given in order of appearance.
type txnNormalizer struct {
	space   string
	session clientv3.LeaseID
	leases  map[int64]string
	revs    map[int64]string
	headers map[string]string
}

var (
	headerRE = regexp.MustCompile(`lg1 [0-9a-f]{64}\n`)
	nonceRE  = regexp.MustCompile(` [0-9a-f]{16}$`)
	leadRE   = regexp.MustCompile(`^[0-9]+ `)
)

func (n *txnNormalizer) lease(id int64) string {
	if id == 0 {
		return "0"
	}
	if id == int64(n.session) {
		return "session"
	}
	if s, ok := n.leases[id]; ok {
		return s
	}
	s := fmt.Sprintf("lease%d", len(n.leases)+1)
	n.leases[id] = s
	return s
}

func (n *txnNormalizer) rev(r int64) string {
	if r == 0 {
		return "0"
	}
	if s, ok := n.revs[r]; ok {
		return s
	}
	s := fmt.Sprintf("rev%d", len(n.revs)+1)
	n.revs[r] = s
	return s
}

// collectRevs names every revision a compare of t makes, first to last.
func (n *txnNormalizer) collectRevs(t *pb.TxnRequest) {
	for _, c := range t.Compare {
		switch c.Target {
		case pb.Compare_CREATE, pb.Compare_MOD:
			n.rev(c.GetCreateRevision() + c.GetModRevision())
		}
	}
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			if nt := op.GetRequestTxn(); nt != nil {
				n.collectRevs(nt)
			}
		}
	}
}

func (n *txnNormalizer) key(b []byte) string {
	s := string(b)
	if s == "\x00" || s == "" {
		return strconv.Quote(s)
	}
	s = strings.ReplaceAll(s, n.space, "<space>")
	if n.session != 0 {
		s = strings.ReplaceAll(s, fmt.Sprintf("%016x", int64(n.session)), "<session>")
	}
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		if r, err := strconv.ParseInt(s[i+1:], 10, 64); err == nil {
			if name, ok := n.revs[r]; ok {
				s = s[:i+1] + "<" + name + ">"
			}
		}
	}
	return strconv.Quote(s)
}

func (n *txnNormalizer) value(b []byte) string {
	s := string(b)
	if m, err := decodeValue(b); err == nil {
		m.Sealed = mark(m.Sealed, "SEALED")
		m.Owner = mark(m.Owner, "OWNER")
		m.Attempt = mark(m.Attempt, "NONCE")
		m.Reenter = mark(m.Reenter, "REENTER")
		if m.Enqueued != 0 {
			m.Enqueued = 1
		}
		s = encodeValue(Secret{}, m)
		s = n.header(headerRE.FindString(string(b))) + s[strings.IndexByte(s, '\n')+1:]
		return strconv.Quote(s)
	}
	s = headerRE.ReplaceAllStringFunc(s, n.header)
	s = nonceRE.ReplaceAllString(s, " <nonce>")
	s = leadRE.ReplaceAllStringFunc(s, func(m string) string {
		r, _ := strconv.ParseInt(strings.TrimSpace(m), 10, 64)
		if name, ok := n.revs[r]; ok {
			return "<" + name + "> "
		}
		return m
	})
	return strconv.Quote(s)
}

func (n *txnNormalizer) header(h string) string {
	if s, ok := n.headers[h]; ok {
		return s
	}
	s := fmt.Sprintf("lg1 <secret%d>\n", len(n.headers)+1)
	n.headers[h] = s
	return s
}

func mark(s, m string) string {
	if s == "" {
		return ""
	}
	return m
}

func (n *txnNormalizer) txn(point string, t *pb.TxnRequest) string {
	n.collectRevs(t)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", point)
	n.body(&b, t, "  ")
	return b.String()
}

func (n *txnNormalizer) body(b *strings.Builder, t *pb.TxnRequest, indent string) {
	for _, c := range t.Compare {
		fmt.Fprintf(b, "%sif   %s\n", indent, n.msg(c))
	}
	for _, part := range []struct {
		name string
		ops  []*pb.RequestOp
	}{{"then", t.Success}, {"else", t.Failure}} {
		for i, op := range part.ops {
			if nt := op.GetRequestTxn(); nt != nil {
				fmt.Fprintf(b, "%s%s %d txn\n", indent, part.name, i)
				n.body(b, nt, indent+"    ")
				continue
			}
			fmt.Fprintf(b, "%s%s %d %s\n", indent, part.name, i, n.msg(op))
		}
	}
}

// msg renders m's set fields in field-number order, with keys, values,
// leases and revisions normalized.
func (n *txnNormalizer) msg(m proto.Message) string {
	r := m.ProtoReflect()
	var fields []protoreflect.FieldDescriptor
	r.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fields = append(fields, fd)
		return true
	})
	sort.Slice(fields, func(i, j int) bool { return fields[i].Number() < fields[j].Number() })
	var parts []string
	for _, fd := range fields {
		v := r.Get(fd)
		name := string(fd.Name())
		var s string
		switch {
		case fd.Kind() == protoreflect.MessageKind:
			s = "{" + n.msg(v.Message().Interface()) + "}"
		case name == "key" || name == "range_end":
			s = n.key(v.Bytes())
		case name == "value":
			s = n.value(v.Bytes())
		case name == "lease":
			s = n.lease(v.Int())
		case name == "create_revision" || name == "mod_revision":
			s = n.rev(v.Int())
		case fd.Kind() == protoreflect.EnumKind:
			s = string(fd.Enum().Values().ByNumber(v.Enum()).Name())
		default:
			s = fmt.Sprint(v.Interface())
		}
		parts = append(parts, name+"="+s)
	}
	return strings.Join(parts, " ")
}

// shapeEnv is one enqueue shape's engines: e is plain, le sends its
// transactions through cap.
type shapeEnv struct {
	t      *testing.T
	e      *Engine
	le     *Engine
	cap    *txnCapture
	norm   *txnNormalizer
	sess   Session
	waiter *Waiter // the last enqueue's
}

func newShapeEnv(t *testing.T, lossWait bool) *shapeEnv {
	e, _ := newEngine(t, func(c *Config) { c.LossWait = lossWait })
	s := &shapeEnv{t: t, e: e, cap: &txnCapture{}}
	cli, err := clientv3.New(clientv3.Config{Endpoints: shared.ClientFor(t).Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	s.cap.KVClient = pb.NewKVClient(cli.ActiveConnection())
	cli.KV = clientv3.NewKVFromKVClient(s.cap, cli)
	if s.le, err = New(cli, e.Config()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.le.Close)
	s.le.hooks = &pointHooks{fn: func(_ context.Context, p string) { s.cap.point(p) }}
	sess, err := e.OpenSession(testCtx(t), "c", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.sess = sess
	s.norm = &txnNormalizer{space: e.Config().Prefix, session: sess.Lease,
		leases: map[int64]string{}, revs: map[int64]string{}, headers: map[string]string{}}
	return s
}

// req is a request with a fixed request id, so that its keys are the
// same from run to run.
func (s *shapeEnv) req(name, id string, session bool) AcquireRequest {
	r := AcquireRequest{Name: name, TTL: 10 * time.Second, ClientID: "c", RequestID: id}
	if session {
		r.Session, r.SessionSecret = s.sess.Lease, s.sess.Secret
	}
	return r
}

func (s *shapeEnv) hold(name string, limit int) {
	r := s.req(name, "holder", false)
	r.Limit = limit
	mustAcquire(s.t, s.e, r)
}

// enqueue enqueues r through the capturing engine and renders its
// transactions and what the attempt learnt from their answers.
func (s *shapeEnv) enqueue(r AcquireRequest) string {
	var w *Waiter
	var err error
	txns := s.cap.run(s.norm, false, func() { w, err = s.le.Enqueue(testCtx(s.t), r) })
	s.waiter = w
	return txns + "=> " + s.outcome(w, err) + "\n"
}

// granted enqueues r behind the holder of its name, lets the holder go
// and renders the transactions of the grant that follows (a session
// waiter's move onto its session lease).
func (s *shapeEnv) granted(r AcquireRequest) string {
	r2 := s.req(r.Name, "holder", false)
	holder := mustAcquire(s.t, s.e, r2)
	out := s.enqueue(r)
	w := s.waiter
	mustRelease(s.t, s.e, holder)
	var g Grant
	var err error
	txns := s.cap.run(s.norm, true, func() { g, err = w.Wait(testCtx(s.t)) })
	if err != nil {
		return out + txns + "=> error: " + errText(err) + "\n"
	}
	q := w.q
	return out + txns + fmt.Sprintf("=> granted lease=%s onSession=%v att=%v ttl=%v recorded=%v resumed=%v\n",
		s.norm.lease(int64(g.Lease)), q.onSession(), q.att.id != 0, g.TTL, q.recorded, g.Resumed)
}

func (s *shapeEnv) try(r AcquireRequest) string {
	var res TryResult
	var err error
	txns := s.cap.run(s.norm, false, func() { res, err = s.le.TryAcquire(testCtx(s.t), r) })
	if err != nil {
		return txns + "=> error: " + errText(err) + "\n"
	}
	return txns + fmt.Sprintf("=> acquired=%v holder=%v delayed=%v\n", res.Acquired, res.Holder != nil, !res.DelayedUntil.IsZero())
}

func errText(err error) string {
	for _, sentinel := range []error{ErrLimitMismatch, ErrQueueFull, ErrSessionLost, ErrGuardFailed, ErrNotOwner} {
		if errors.Is(err, sentinel) {
			return sentinel.Error()
		}
	}
	return err.Error()
}

func (s *shapeEnv) outcome(w *Waiter, err error) string {
	if err != nil {
		return "error: " + errText(err)
	}
	q := w.q
	keyLease := q.h.Lease // the lease the key rides on: the attempt lease while q holds a reference to it
	if q.att.id != 0 {
		keyLease = q.att.id
	}
	return fmt.Sprintf("lease=%s keyLease=%s att=%v ttl=%v deadline=%v resumed=%v first=%s holds=%v recorded=%v keep=%v delays=%v ahead=%d firstAt=%v onSession=%v",
		s.norm.lease(int64(q.h.Lease)), s.norm.lease(int64(keyLease)), q.att.id != 0, q.ttl, !q.deadline.IsZero(), q.resumed,
		s.norm.key(q.first.GetKey()), q.holds, q.recorded, q.keep, q.delays, q.ahead, q.firstAt, q.onSession())
}

// TestEnqueueTxnGolden pins the exact acquire and takeover transactions
// (compares, operations, leases, values) of each enqueue shape, a session
// waiter's grant, and what the attempt reads from their answers, against
// testdata/enqueue_txns.golden: the enqueue's parts may be arranged
// differently in code, never in what reaches etcd.
func TestEnqueueTxnGolden(t *testing.T) {
	shapes := []struct {
		name     string
		lossWait bool
		run      func(s *shapeEnv) string
	}{
		{"plain first", false, func(s *shapeEnv) string { return s.enqueue(s.req("a", "r1", false)) }},
		{"plain first loss wait", true, func(s *shapeEnv) string { return s.enqueue(s.req("a", "r1", false)) }},
		{"plain queued loss wait", true, func(s *shapeEnv) string {
			s.hold("a", 0)
			return s.enqueue(s.req("a", "r1", false))
		}},
		{"session first", false, func(s *shapeEnv) string { return s.enqueue(s.req("a", "r1", true)) }},
		{"session first loss wait", true, func(s *shapeEnv) string { return s.enqueue(s.req("a", "r1", true)) }},
		{"session queued", false, func(s *shapeEnv) string {
			s.hold("a", 0)
			return s.enqueue(s.req("a", "r1", true))
		}},
		{"session queued loss wait", true, func(s *shapeEnv) string {
			s.hold("a", 0)
			return s.enqueue(s.req("a", "r1", true))
		}},
		{"session before grant", true, func(s *shapeEnv) string {
			r := s.req("a", "r1", true)
			r.BeforeGrant = func(context.Context) error { return nil }
			return s.enqueue(r)
		}},
		{"session reentrant delay", true, func(s *shapeEnv) string {
			r := s.req("a", "r1", true)
			r.Reentrant, r.LockDelay = true, 2*time.Second
			return s.enqueue(r)
		}},
		{"session wrong secret", true, func(s *shapeEnv) string {
			r := s.req("a", "r1", true)
			r.SessionSecret = Secret{1}
			return s.enqueue(r)
		}},
		{"lock delay", true, func(s *shapeEnv) string {
			r := s.req("a", "r1", false)
			r.LockDelay = 3 * time.Second
			return s.enqueue(r)
		}},
		{"election value", false, func(s *shapeEnv) string {
			r := s.req(ElectionName("el"), "r1", false)
			r.Value = []byte("candidate")
			return s.enqueue(r)
		}},
		{"try free", true, func(s *shapeEnv) string { return s.try(s.req("a", "r1", false)) }},
		{"try held", true, func(s *shapeEnv) string {
			s.hold("a", 0)
			return s.try(s.req("a", "r1", false))
		}},
		{"try session held", false, func(s *shapeEnv) string {
			s.hold("a", 0)
			return s.try(s.req("a", "r1", true))
		}},
		{"try held other limit", false, func(s *shapeEnv) string {
			s.hold("a", 0)
			r := s.req("a", "r1", false)
			r.Limit = 2
			return s.try(r)
		}},
		{"semaphore", true, func(s *shapeEnv) string {
			s.hold("a", 3)
			r := s.req("a", "r1", false)
			r.Limit = 3
			return s.enqueue(r)
		}},
		{"semaphore try", false, func(s *shapeEnv) string {
			s.hold("a", 2)
			r := s.req("a", "r1", false)
			r.Limit = 2
			return s.try(r)
		}},
		{"semaphore other limit", false, func(s *shapeEnv) string {
			s.hold("a", 0)
			r := s.req("a", "r1", false)
			r.Limit = 2
			return s.enqueue(r)
		}},
		{"queue full", false, func(s *shapeEnv) string {
			s.hold("a", 0)
			r := s.req("a", "r1", false)
			r.MaxKeys = 1
			return s.enqueue(r)
		}},
		{"guards", true, func(s *shapeEnv) string {
			gk := s.e.Config().Prefix + "/epoch"
			if _, err := s.e.cli.Put(testCtx(s.t), gk, "7"); err != nil {
				s.t.Fatal(err)
			}
			r := s.req("a", "r1", false)
			r.Guards = []clientv3.Cmp{clientv3.Compare(clientv3.Value(gk), "=", "7")}
			out := s.enqueue(r)
			r = s.req("b", "r2", false)
			r.Guards = []clientv3.Cmp{clientv3.Compare(clientv3.Value(gk), "=", "8")}
			return out + s.enqueue(r)
		}},
		{"session granted", false, func(s *shapeEnv) string { return s.granted(s.req("a", "r1", true)) }},
		{"session granted loss wait", true, func(s *shapeEnv) string { return s.granted(s.req("a", "r1", true)) }},
		{"session granted delay", false, func(s *shapeEnv) string {
			r := s.req("a", "r1", true)
			r.LockDelay = time.Second
			return s.granted(r)
		}},
		{"retry queued", true, func(s *shapeEnv) string {
			s.hold("a", 0)
			out := s.enqueue(s.req("a", "r1", false))
			return out + s.enqueue(s.req("a", "r1", false))
		}},
		{"retry held", true, func(s *shapeEnv) string {
			out := s.enqueue(s.req("a", "r1", false))
			return out + s.enqueue(s.req("a", "r1", false))
		}},
		{"retry session queued", true, func(s *shapeEnv) string {
			s.hold("a", 0)
			out := s.enqueue(s.req("a", "r1", true))
			return out + s.enqueue(s.req("a", "r1", true))
		}},
		{"retry session held", true, func(s *shapeEnv) string {
			out := s.enqueue(s.req("a", "r1", true))
			return out + s.enqueue(s.req("a", "r1", true))
		}},
		{"retry other caller", false, func(s *shapeEnv) string {
			out := s.enqueue(s.req("a", "r1", false))
			r := s.req("a", "r1", false)
			r.ClientID = "other"
			return out + s.enqueue(r)
		}},
	}
	var b strings.Builder
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			s := newShapeEnv(t, sh.lossWait)
			fmt.Fprintf(&b, "## %s\n%s\n", sh.name, sh.run(s))
		})
	}
	path := filepath.Join("testdata", "enqueue_txns.golden")
	if *updateTxnGolden {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("the transactions differ from %s at line %d:\n got  %s\n want %s\n(rerun with -golden.update only when the change is meant)", path, i+1, g, w)
			}
		}
	}
}
