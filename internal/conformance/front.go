package conformance

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/internal/server"
)

// front is the address a gateway is known by: a counting reverse proxy
// in front of one gateway process. Clients only ever see the front's
// address, so a gateway stopped and started again is back on the same
// address whatever port its new process binds; while it is stopped the
// front's listener is closed too, so a client's connection is refused
// exactly as it would be by a dead process.
type front struct {
	addr   string // fixed loopback host:port, kept across restarts
	start  func(context.Context) (*server.Server, error)
	tokens map[string]string // bearer token → its name in Description.Tokens

	mu       sync.Mutex
	gw       *server.Server  // nil while stopped
	srv      *http.Server    // nil while stopped
	tr       *http.Transport // the proxy's connections to the gateway
	counts   map[string]int64
	byToken  map[string]map[string]int64 // credential name → path → count
	arrivals map[string][]*Arrival       // path → in order of arrival
	total    int64
}

// Arrival is one request a front received: when, on the wall clock (Unix
// milliseconds, so that a runner in another process can compare its own
// clock readings with it), and whether the gateway answered it without
// error (false while it is in flight). A confirmation of a lease that a
// caller read came from a request with OK set, and etcd counts that
// lease's TTL from no earlier than the request's arrival.
type Arrival struct {
	AtMs int64 `json:"atMs"`
	OK   bool  `json:"ok"`
}

// up starts the gateway, its start bounded by ctx, and the front's
// listener on addr.
func (f *front) up(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gw != nil {
		return nil
	}
	gw, err := f.start(ctx)
	if err != nil {
		return err
	}
	backend, err := url.Parse(gw.URL())
	if err != nil {
		shutdownNow(gw)
		return err
	}
	ln, err := listenRetry(f.addr)
	if err != nil {
		shutdownNow(gw)
		return err
	}
	proxy := httputil.NewSingleHostReverseProxy(backend)
	f.tr = h2cTransport()
	proxy.Transport = f.tr
	proxy.FlushInterval = -1 // streamed answers (Acquire) pass through at once
	proxy.ErrorLog = nil
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	f.srv = &http.Server{Handler: f.count(proxy), Protocols: &p, ReadHeaderTimeout: 10 * time.Second}
	f.gw = gw
	go func(srv *http.Server) { _ = srv.Serve(ln) }(f.srv)
	return nil
}

// down stops the gateway without a grace period: the process stops
// first (open waits end with SHUTTING_DOWN, no call in flight is waited
// for), then the front's listener and every connection through it close.
// Held locks and waiters stay in etcd, where their leases lapse unless
// another gateway renews them.
//
// The order matters: closing the connections first would show the gateway
// its callers leaving while it still runs, and it would give their waits
// up (an abandoned wait leaves the queue), which is a client's death, not
// the gateway's.
func (f *front) down() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gw == nil {
		return
	}
	f.tr.CloseIdleConnections() // or the stop waits out their GOAWAY grace
	shutdownNow(f.gw)
	_ = f.srv.Close()
	f.tr.CloseIdleConnections()
	f.gw, f.srv, f.tr = nil, nil, nil
}

// running reports whether the gateway is up, and its own URL (not the
// front's) for the harness's uncounted calls.
func (f *front) running() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gw == nil {
		return "", false
	}
	return f.gw.URL(), true
}

func (f *front) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.counts[r.URL.Path]++
		cred := f.credential(r.Header.Get("Authorization"))
		if f.byToken[cred] == nil {
			f.byToken[cred] = map[string]int64{}
		}
		f.byToken[cred][r.URL.Path]++
		f.total++
		a := &Arrival{AtMs: time.Now().UnixMilli()}
		f.arrivals[r.URL.Path] = append(f.arrivals[r.URL.Path], a)
		f.mu.Unlock()
		o := &outcome{ResponseWriter: w}
		next.ServeHTTP(o, r)
		ok := o.ok()
		f.mu.Lock()
		a.OK = ok
		f.mu.Unlock()
	})
}

// credential names the bearer token an Authorization header presents by
// its key in Description.Tokens: "none" without one, "other" for a token
// the harness did not make. The token itself is never recorded.
func (f *front) credential(header string) string {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	switch {
	case header == "":
		return "none"
	case !ok:
		return "other"
	}
	if name, ok := f.tokens[tok]; ok {
		return name
	}
	return "other"
}

// requests returns the requests received since the last reset: counted
// by path and by credential and path, and their arrivals by path.
func (f *front) requests() requestsBody {
	f.mu.Lock()
	defer f.mu.Unlock()
	byToken := make(map[string]map[string]int64, len(f.byToken))
	for cred, paths := range f.byToken {
		byToken[cred] = maps.Clone(paths)
	}
	arrivals := make(map[string][]Arrival, len(f.arrivals))
	for path, as := range f.arrivals {
		for _, a := range as {
			arrivals[path] = append(arrivals[path], *a)
		}
	}
	return requestsBody{Total: f.total, ByPath: maps.Clone(f.counts), ByToken: byToken, Arrivals: arrivals}
}

func (f *front) resetRequests() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts = map[string]int64{}
	f.byToken = map[string]map[string]int64{}
	f.arrivals = map[string][]*Arrival{}
	f.total = 0
}

// shutdownNow stops a gateway as a SIGTERM does, with a short grace
// period.
func shutdownNow(gw *server.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = gw.Shutdown(ctx)
}

// listenRetry binds addr, retrying briefly: a port the front itself just
// released can take a moment to be free again.
func listenRetry(addr string) (net.Listener, error) {
	var err error
	for i := 0; i < 50; i++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, errors.Join(errors.New("conformance: cannot bind the gateway's address again"), err)
}

// h2cTransport speaks unencrypted HTTP/2 (prior knowledge), as gRPC
// streaming through the front needs.
func h2cTransport() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &p}
}
