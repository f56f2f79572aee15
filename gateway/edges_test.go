package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// wait_timeout_ms is checked in its own unit before any conversion: huge
// values used to overflow the conversion and pass the range check, one of
// them becoming "wait forever".
func TestWaitTimeoutOutOfRangeIsRefused(t *testing.T) {
	g := startGateway(t, "")
	holder := tryAcquire(t, g, "x")
	for _, ms := range []int64{9223372036854776, 288230376151711744, 1 << 62, 3600_001} {
		st, err := g.client.Acquire(ctxT(t), connect.NewRequest(&v1.AcquireRequest{Name: "x", TtlMs: 10000, WaitTimeoutMs: ms}))
		if err == nil {
			for st.Receive() {
				if st.Msg().GetQueued() != nil {
					err = nil
					break
				}
			}
			if err == nil {
				err = st.Err()
			}
			st.Close()
		}
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Acquire with wait_timeout_ms %d = %v; want invalid_argument", ms, err)
		}
	}
	release(t, g, holder)
}

// edgeRequest sends one HTTP request to g and returns its status.
func edgeRequest(t *testing.T, g *gw, method, path string, header http.Header, body string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), method, g.url+path, strings.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := g.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// Browsers send text/plain and form bodies across origins without a
// preflight: the REST API takes application/json only. A page from another
// origin is refused outright, and on a loopback listener so is a Host that
// a page could have rebound to 127.0.0.1.
func TestWebPagesCannotDriveALoopbackGateway(t *testing.T) {
	g := startGateway(t, "")
	body := `{"name":"from-a-page","ttlMs":5000}`
	for _, tc := range []struct {
		what   string
		header http.Header
		want   int
	}{
		{"text/plain", http.Header{"Content-Type": {"text/plain"}}, http.StatusUnsupportedMediaType},
		{"a form", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, http.StatusUnsupportedMediaType},
		{"no content type", http.Header{}, http.StatusUnsupportedMediaType},
		{"another origin", http.Header{"Content-Type": {"application/json"}, "Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"a rebound Host", http.Header{"Content-Type": {"application/json"}, "Host": {"evil.example:7070"}}, http.StatusForbidden},
	} {
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, g.url+"/api/v1/locks/acquire", strings.NewReader(body))
		for k, v := range tc.header {
			if k == "Host" {
				req.Host = v[0]
				continue
			}
			req.Header[k] = v
		}
		resp, err := g.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("REST acquire with %s = %d; want %d", tc.what, resp.StatusCode, tc.want)
		}
	}
	// Connect calls from another origin are refused too.
	if got := edgeRequest(t, g, http.MethodPost, "/leasegate.v1.LockService/TryAcquire",
		http.Header{"Content-Type": {"application/json"}, "Origin": {"https://evil.example"}}, `{"name":"from-a-page"}`); got != http.StatusForbidden {
		t.Errorf("Connect TryAcquire from another origin = %d; want 403", got)
	}
	if d, err := g.client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: "from-a-page"})); err != nil || d.Msg.Held {
		t.Fatalf("after the refused calls: %v, %v; want nothing held", d, err)
	}
}

// An origin named in --cors-origin gets CORS answers, preflights included.
func TestAllowedOriginGetsCORS(t *testing.T) {
	g := startGatewayWith(t, func(c *server.Config) { c.Gateway.CORSOrigins = []string{"https://console.example"} })
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodOptions, g.url+"/leasegate.v1.LockService/Describe", nil)
	req.Header.Set("Origin", "https://console.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "connect-protocol-version,content-type")
	resp, err := g.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "https://console.example" {
		t.Fatalf("preflight from an allowed origin: status %d, headers %v", resp.StatusCode, resp.Header)
	}
	if got := edgeRequest(t, g, http.MethodPost, "/leasegate.v1.LockService/Describe",
		http.Header{"Content-Type": {"application/json"}, "Origin": {"https://console.example"}}, `{"name":"x"}`); got != http.StatusOK {
		t.Errorf("Describe from the allowed origin = %d; want 200", got)
	}
}

// A compression the gateway does not speak is bad input (4xx), not a
// missing feature (Connect answers 501).
func TestUnknownCompressionIsBadInput(t *testing.T) {
	g := startGateway(t, "")
	for _, h := range []http.Header{
		{"Content-Type": {"application/json"}, "Content-Encoding": {"br"}},
		{"Content-Type": {"application/proto"}, "Content-Encoding": {"zstd"}},
	} {
		if got := edgeRequest(t, g, http.MethodPost, "/leasegate.v1.LockService/Describe", h, "x"); got != http.StatusBadRequest {
			t.Errorf("Describe with %v = %d; want 400", h, got)
		}
	}
	if got := edgeRequest(t, g, http.MethodPost, "/api/v1/locks/acquire",
		http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, "x"); got != http.StatusBadRequest {
		t.Errorf("REST acquire with a gzip body = %d; want 400", got)
	}
}

// slowBody sends its first chunk and then nothing until released.
type slowBody struct {
	first   []byte
	release chan struct{}
}

func (b *slowBody) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	<-b.release
	return 0, io.EOF
}

// A caller without credentials is refused from its headers: its body —
// here one that never finishes, or a compressed one — is never read, and
// the refusal comes at once.
func TestUnauthenticatedCallsAreRefusedBeforeTheirBody(t *testing.T) {
	g := startSecureGateway(t, nil)
	for _, path := range []string{"/leasegate.v1.LockService/TryAcquire", "/api/v1/locks/acquire"} {
		body := &slowBody{first: bytes.Repeat([]byte{'{'}, 60<<10), release: make(chan struct{})}
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, g.url+path, body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		req.ContentLength = -1
		got := make(chan int, 1)
		go func() {
			resp, err := g.http.Do(req)
			if err != nil {
				got <- 0
				return
			}
			// (Closing the answer waits for the request body to finish.)
			got <- resp.StatusCode
			resp.Body.Close()
		}()
		select {
		case code := <-got:
			if code != http.StatusUnauthorized {
				t.Errorf("%s without credentials = %d; want 401", path, code)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s without credentials got no answer while its body was unfinished", path)
		}
		close(body.release)
	}
	// Several Authorization headers are refused: a proxy in front could
	// read another one than the gateway.
	if got := edgeRequest(t, g, http.MethodPost, "/leasegate.v1.LockService/Describe",
		http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + tokenA, "Bearer " + tokenB}}, `{"name":"x"}`); got != http.StatusUnauthorized {
		t.Errorf("a call with two Authorization headers = %d; want 401", got)
	}
}
