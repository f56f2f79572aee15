package gateway_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// stalledAcquire opens a Connect streaming Acquire over a raw HTTP/2
// connection that advertises a zero flow-control window: the gateway can
// send headers but not one byte of any message. The connection stays up
// (settings and pings are answered) until the test ends.
func stalledAcquire(t *testing.T, addr string, req *v1.AcquireRequest) {
	t.Helper()
	stalledStream(t, addr, "/leasegate.v1.LockService/Acquire", req)
}

// stalledStream opens a Connect server stream of path with req as
// stalledAcquire does. Its headers channel is closed when the stream's
// response headers arrive, reset when the gateway resets the stream (or
// the connection ends).
func stalledStream(t *testing.T, addr, path string, req proto.Message) (headers, reset <-chan struct{}) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
		{":path", path},
		{"content-type", "application/connect+proto"}, {"connect-protocol-version", "1"},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	env := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	if err := fr.WriteData(1, true, append(env, msg...)); err != nil {
		t.Fatal(err)
	}
	hdrs, rst := make(chan struct{}), make(chan struct{})
	var once, hOnce sync.Once
	go func() {
		defer once.Do(func() { close(rst) })
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.HeadersFrame:
				if f.StreamID == 1 {
					hOnce.Do(func() { close(hdrs) })
				}
			case *http2.RSTStreamFrame:
				if f.StreamID == 1 {
					once.Do(func() { close(rst) })
				}
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					_ = fr.WritePing(true, f.Data)
				}
			}
		}
	}()
	return hdrs, rst
}

// keysOf counts the lock keys of name under a gateway's prefix.
func keysOf(t *testing.T, cli *clientv3.Client, prefix, name string) int64 {
	t.Helper()
	resp, err := cli.Get(ctxT(t), prefix+"/locks/"+name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// awaitKeys waits, by polling etcd, until name has want keys.
func awaitKeys(t *testing.T, cli *clientv3.Client, prefix, name string, want int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		n := keysOf(t, cli, prefix, name)
		if n == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s has %d keys %s on; want %d", name, n, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A client that stops reading its stream holds nothing: a queued waiter
// whose position cannot be delivered leaves the queue, and a grant that
// cannot be delivered is given up, each within the send timeout — not
// when the TCP connection dies.
func TestClientThatStopsReadingHoldsNothing(t *testing.T) {
	t.Parallel()
	const sendTimeout = time.Second
	g := startGatewayWith(t, func(c *server.Config) { c.Gateway.SendTimeout = sendTimeout })
	cli := etcdClient(t)
	for _, holder := range []bool{true, false} {
		name := fmt.Sprintf("stalled-%v", holder)
		if holder {
			tryAcquire(t, g, name)
		}
		stalledAcquire(t, g.Server.Addr(), &v1.AcquireRequest{Name: name, TtlMs: 30000, ClientId: "stalled"})
		want := int64(0)
		if holder {
			want = 1 // the holder's key alone
		}
		// The stalled client's key appears, then goes within the bound.
		awaitKeys(t, cli, g.Prefix, name, want+1, 10*time.Second)
		took := awaitKeys(t, cli, g.Prefix, name, want, 5*sendTimeout)
		t.Logf("holder %v: the stalled client's key went %s after it appeared (send timeout %s)", holder, took.Round(10*time.Millisecond), sendTimeout)
		if !holder {
			// The name is free for anyone else now.
			tryAcquire(t, g, name)
		}
	}
}

// A client without credentials that opens streams and never finishes their
// bodies pins nothing: each is refused from its headers, and no handler
// goroutine stays behind to read the body.
func TestUnfinishedUnauthenticatedStreamsPinNothing(t *testing.T) {
	// Not parallel: it counts the whole process's goroutines.
	// The body-read timeout is far longer than the test waits, so a handler
	// blocked reading a body cannot pass by timing out.
	g := startSecureGateway(t, func(c *server.Config) { c.Gateway.BodyReadTimeout = 10 * time.Minute })
	addr := g.Server.Addr()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	const streams = 500
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	chunk := bytes.Repeat([]byte("x"), 1<<10)
	for i := 0; i < streams; i++ {
		hb.Reset()
		for _, f := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
			{":path", "/leasegate.v1.LockService/TryAcquire"}, {"content-type", "application/proto"},
		} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, false, chunk); err != nil { // never ended
			t.Fatal(err)
		}
	}
	dec := hpack.NewDecoder(4096, nil)
	refused := map[uint32]bool{}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for len(refused) < streams {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d of %d answers: %v", len(refused), streams, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == ":status" && hf.Value == "401" {
					refused[f.StreamID] = true
				}
			}
		}
	}
	// The refusals are written; no handler is left reading a body. Handlers
	// that wrote their refusal may still be returning, and a goroutine's
	// exit cannot be awaited, so the count is sampled until it settles; a
	// handler blocked on a body would keep it up for the 10-minute timeout.
	limit := before + streams/10
	deadline := time.Now().Add(5 * time.Second)
	after := runtime.NumGoroutine()
	for after > limit && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
		after = runtime.NumGoroutine()
	}
	if after > limit {
		t.Fatalf("goroutines %d → %d with %d unfinished streams refused; want no goroutine per stream", before, after, streams)
	}
}
