package gateway_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/shard"
)

// oneWriter serves a gateway's handler and checks how every response is
// written: a Connect stream takes one message at a time, and nothing once
// its handler has returned. Per response it records a write (header, body
// or flush) that overlaps another, one after ServeHTTP returned, and, for
// the paths in sameGoroutine, one from any goroutine but the one serving
// the request.
type oneWriter struct {
	next          http.Handler
	sameGoroutine map[string]bool

	wg     sync.WaitGroup // ServeHTTP calls in progress
	mu     sync.Mutex
	faults []string
	writes map[string]int // checked writes, by path
}

func (o *oneWriter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.wg.Add(1)
	defer o.wg.Done()
	cw := &checkedWriter{ResponseWriter: w, o: o, path: r.URL.Path, owner: goid(), one: o.sameGoroutine[r.URL.Path]}
	o.next.ServeHTTP(cw, r)
	cw.mu.Lock()
	cw.returned = true
	cw.mu.Unlock()
}

func (o *oneWriter) fault(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.faults) < 20 {
		o.faults = append(o.faults, fmt.Sprintf(format, args...))
	}
}

// check waits for every request to be served and fails t with the faults
// seen; it returns the checked writes by path.
func (o *oneWriter) check(t *testing.T) map[string]int {
	t.Helper()
	o.wg.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range o.faults {
		t.Error(f)
	}
	return o.writes
}

type checkedWriter struct {
	http.ResponseWriter
	o     *oneWriter
	path  string
	owner int64
	one   bool

	mu       sync.Mutex
	busy     bool
	returned bool
}

// enter records the start of a write; the returned func its end.
func (c *checkedWriter) enter(op string) func() {
	g := goid()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.returned:
		c.o.fault("%s: %s after the handler returned (goroutine %d)", c.path, op, g)
	case c.busy:
		c.o.fault("%s: %s while another write was in progress (goroutine %d)", c.path, op, g)
	case c.one && g != c.owner:
		c.o.fault("%s: %s from goroutine %d; the request is served by goroutine %d", c.path, op, g, c.owner)
	}
	c.busy = true
	c.o.mu.Lock()
	if c.o.writes == nil {
		c.o.writes = map[string]int{}
	}
	c.o.writes[c.path]++
	c.o.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
	}
}

func (c *checkedWriter) WriteHeader(code int) {
	defer c.enter("WriteHeader")()
	c.ResponseWriter.WriteHeader(code)
}

func (c *checkedWriter) Write(b []byte) (int, error) {
	defer c.enter("Write")()
	return c.ResponseWriter.Write(b)
}

func (c *checkedWriter) FlushError() error {
	defer c.enter("Flush")()
	return http.NewResponseController(c.ResponseWriter).Flush()
}

func (c *checkedWriter) Flush() { _ = c.FlushError() }

func (c *checkedWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// goid is the calling goroutine's id, from its stack's first line
// ("goroutine 42 [running]:").
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		panic(fmt.Sprintf("goid: %q", buf[:]))
	}
	return id
}

// serveChecked runs a gateway service with cfg (and the engines' queue
// config from adjust, when set) over the shared etcd under a fresh prefix,
// its handler wrapped by o, on a loopback port speaking h2c, and returns
// its URL. Everything stops at t's cleanup.
func serveChecked(t *testing.T, cfg gateway.Config, o *oneWriter, adjust func(*locks.RouterConfig)) string {
	t.Helper()
	cli, err := etcdClientFor()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	rc := locks.DefaultRouterConfig()
	rc.Prefix = gwtest.NewPrefix()
	rc.Watch = false
	rc.Dial = func(string, []string) (*clientv3.Client, error) { return etcdClientFor() }
	if adjust != nil {
		adjust(&rc)
	}
	router, err := locks.NewRouter(context.Background(), cli,
		shard.Map{Epoch: shard.MinEpoch, Clusters: []shard.Cluster{{Name: "main", Endpoints: cli.Endpoints()}}}, rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(router.Close)
	svc, err := gateway.NewService(cfg, router, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Shutdown)
	o.next = svc.Handler()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := gateway.NewHTTPServer(ln.Addr().String(), o)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// rawStream is a Connect server stream read envelope by envelope, opened
// once its response headers are in.
type rawStream struct {
	msgs chan envelope
}

type envelope struct {
	flags byte
	data  []byte
	err   error // reading failed
}

// openRawStream posts req to path on the gateway at url and returns once
// the response headers have arrived; the stream ends at t's cleanup.
func openRawStream(t *testing.T, hc *http.Client, url, path string, req proto.Message) *rawStream {
	t.Helper()
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	t.Cleanup(cancel)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path,
		bytes.NewReader(append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/connect+proto")
	hr.Header.Set("Connect-Protocol-Version", "1")
	resp, err := hc.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d", path, resp.StatusCode)
	}
	s := &rawStream{msgs: make(chan envelope, 16)}
	go func() {
		defer resp.Body.Close()
		defer close(s.msgs)
		for {
			var hdr [5]byte
			if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
				s.msgs <- envelope{err: err}
				return
			}
			data := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
			if _, err := io.ReadFull(resp.Body, data); err != nil {
				s.msgs <- envelope{err: err}
				return
			}
			s.msgs <- envelope{flags: hdr[0], data: data}
			if hdr[0]&2 != 0 {
				return // the end of the stream
			}
		}
	}()
	return s
}

// streamEnd is a Connect stream's end: the error it carries, if any.
type streamEnd struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// next returns the stream's next message decoded into m (true), or its
// end (false and the end).
func (s *rawStream) next(t *testing.T, m proto.Message) (bool, streamEnd) {
	t.Helper()
	var e envelope
	select {
	case e = <-s.msgs:
	case <-time.After(20 * time.Second):
		t.Fatal("no message nor end on the stream in 20 s")
	}
	var end streamEnd
	switch {
	case e.err != nil:
		t.Fatalf("reading the stream: %v", e.err)
	case e.flags&2 != 0:
		if err := json.Unmarshal(e.data, &end); err != nil {
			t.Fatalf("end of stream %q: %v", e.data, err)
		}
		return false, end
	case e.flags != 0:
		t.Fatalf("envelope flags %#x", e.flags)
	}
	if err := proto.Unmarshal(e.data, m); err != nil {
		t.Fatal(err)
	}
	return true, end
}

// nextHold is next for a WatchHold stream: its message, or nil and the
// stream's end.
func (s *rawStream) nextHold(t *testing.T) (*v1.WatchHoldResponse, streamEnd) {
	t.Helper()
	m := &v1.WatchHoldResponse{}
	if ok, end := s.next(t, m); !ok {
		return nil, end
	}
	return m, streamEnd{}
}
