//go:build linux

package chaos

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/client"
)

// Attempt is one Acquire (or Campaign) RPC of an op: the SDK retries an
// acquire on another gateway when a stream fails.
type Attempt struct {
	// Start is when the RPC was sent; End when its stream was closed
	// (right after the grant arrived, or on failure).
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitzero"`
}

// sdk makes SDK clients over a set of gateway endpoints that share one
// HTTP/2 transport. Each recorded acquire gets a client of its own whose
// transport notes the op's Acquire attempts, so the checkers can tell
// where a late answer spent its time.
type sdk struct {
	endpoints []string
	opts      []client.Option
	tr        *http.Transport
	base      *client.Client // for calls other than acquires
}

// newSDK returns an sdk over endpoints (the gateways' front links when
// nil), with its own connections.
func (h *Harness) newSDK(id string, endpoints []string, extra ...client.Option) (*sdk, error) {
	if endpoints == nil {
		endpoints = h.frontURLs()
	}
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	s := &sdk{endpoints: endpoints, tr: &http.Transport{
		Protocols:       &p,
		DialContext:     (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		IdleConnTimeout: 90 * time.Second,
		HTTP2:           &http.HTTP2Config{SendPingTimeout: 10 * time.Second, PingTimeout: 5 * time.Second},
	}}
	s.opts = append([]client.Option{
		client.WithClientID(id),
		client.WithRequestTimeout(2 * time.Second),
		client.WithRetryBackoff(50*time.Millisecond, 500*time.Millisecond),
	}, extra...)
	h.addCloser(s.tr.CloseIdleConnections)
	var err error
	s.base, err = s.client(s.tr)
	return s, err
}

func (s *sdk) client(rt http.RoundTripper) (*client.Client, error) {
	return client.New(s.endpoints, append(s.opts, client.WithHTTPClient(&http.Client{Transport: rt}))...)
}

// forOp returns a client whose Acquire attempts are recorded on op.
func (s *sdk) forOp(hist *History, op *AcquireOp) (*client.Client, error) {
	return s.client(&attemptRecorder{rt: s.tr, hist: hist, op: op})
}

// attemptRecorder notes the Acquire RPCs that pass through it.
type attemptRecorder struct {
	rt   http.RoundTripper
	hist *History
	op   *AcquireOp
}

// RoundTrip records an Acquire's start and, when its response body is
// closed or the request fails, its end.
func (a *attemptRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.URL.Path, "/Acquire") && !strings.HasSuffix(req.URL.Path, "/Campaign") {
		return a.rt.RoundTrip(req)
	}
	var i int
	a.hist.update(func() {
		i = len(a.op.Attempts)
		a.op.Attempts = append(a.op.Attempts, Attempt{Start: time.Now()})
	})
	end := func() {
		now := time.Now()
		a.hist.update(func() {
			if a.op.Attempts[i].End.IsZero() {
				a.op.Attempts[i].End = now
			}
		})
	}
	resp, err := a.rt.RoundTrip(req)
	if err != nil {
		end()
		return nil, err
	}
	resp.Body = &endingBody{ReadCloser: resp.Body, end: end}
	return resp, nil
}

type endingBody struct {
	io.ReadCloser
	once sync.Once
	end  func()
}

func (b *endingBody) Close() error {
	b.once.Do(b.end)
	return b.ReadCloser.Close()
}
