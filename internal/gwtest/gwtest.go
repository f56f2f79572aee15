// Package gwtest runs leasegate gateways in-process for tests: each over a
// real embedded etcd (internal/etcdtest), under a prefix of its own so tests
// sharing one etcd member stay independent, on a free loopback port, and
// stopped at the test's cleanup. It is the one harness for a running
// gateway; packages add only what is particular to their tests.
package gwtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Gateway is a gateway running in-process on a free loopback port.
type Gateway struct {
	// Server is the running server; nil once Stop has run.
	Server *server.Server
	// URL is the base URL of every API: Connect, gRPC and gRPC-Web, and
	// REST under /api/v1/.
	URL string
	// Addr is the listener's host:port.
	Addr string
	// Prefix is the etcd key prefix the gateway serves under.
	Prefix string
	// HTTP speaks unencrypted HTTP/2 (h2c, as gRPC needs); its idle
	// connections are closed at Stop.
	HTTP *http.Client
	// Client is a Connect client of the lock service over HTTP, without
	// credentials.
	Client leasegatev1connect.LockServiceClient
}

// Option adjusts how Start configures a gateway.
type Option func(*settings)

type settings struct {
	prefix   string
	clusters []server.Cluster
	tokens   string
	adjust   []func(*server.Config)
}

// Prefix serves under p instead of a fresh prefix: for a second gateway of
// the same fleet (pass the first one's Prefix).
func Prefix(p string) Option { return func(s *settings) { s.prefix = p } }

// Clusters serves over clusters (the first is home) instead of the etcd
// passed to Start.
func Clusters(clusters ...server.Cluster) Option {
	return func(s *settings) { s.clusters = append(s.clusters, clusters...) }
}

// Tokens authenticates callers with a static tokens file of these lines,
// each "token tenant subject" (see docs/security.md).
func Tokens(lines ...string) Option {
	return func(s *settings) { s.tokens = strings.Join(lines, "\n") + "\n" }
}

// Clock gives the gateway c for its timeouts, expiries and rate limits.
func Clock(c clock.Clock) Option {
	return Configure(func(cfg *server.Config) { cfg.Gateway.Clock = c })
}

// NoLossWait frees a name as soon as its holder's key goes, however it went
// (queue.Config.LossWait off): for tests that end a lease behind a holder's
// back to see what the holder is told, not how long the name then waits.
func NoLossWait() Option {
	return Configure(func(cfg *server.Config) { cfg.Fleet.Queue.LossWait = false })
}

// Configure applies adjust to the configuration last, after every other
// option.
func Configure(adjust func(*server.Config)) Option {
	return func(s *settings) {
		if adjust != nil {
			s.adjust = append(s.adjust, adjust)
		}
	}
}

var prefixSeq atomic.Int64

// NewPrefix returns an etcd key prefix no other gateway of this process
// has used.
func NewPrefix() string { return fmt.Sprintf("/gwtest/%d", prefixSeq.Add(1)) }

// Start starts a gateway over etcd (which may be nil when Clusters names
// them) and stops it at tb's cleanup. It fails tb if the gateway does not
// start.
func Start(tb testing.TB, etcd *etcdtest.Cluster, opts ...Option) *Gateway {
	tb.Helper()
	var s settings
	for _, o := range opts {
		o(&s)
	}
	tokens := ""
	if s.tokens != "" {
		tokens = filepath.Join(tb.TempDir(), "tokens")
		if err := os.WriteFile(tokens, []byte(s.tokens), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	g, err := launch(etcd, s, tokens)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(g.Stop)
	return g
}

// Launch starts a gateway outside a test (in an Example or a TestMain);
// the caller must Stop it. Tokens is not available here.
func Launch(etcd *etcdtest.Cluster, opts ...Option) (*Gateway, error) {
	var s settings
	for _, o := range opts {
		o(&s)
	}
	if s.tokens != "" {
		return nil, fmt.Errorf("gwtest: Launch cannot write a tokens file; use Start")
	}
	return launch(etcd, s, "")
}

func launch(etcd *etcdtest.Cluster, s settings, tokens string) (*Gateway, error) {
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Prefix = s.prefix
	if cfg.Prefix == "" {
		cfg.Prefix = NewPrefix()
	}
	cfg.Clusters = s.clusters
	if len(cfg.Clusters) == 0 {
		if etcd == nil {
			return nil, fmt.Errorf("gwtest: no etcd and no Clusters option")
		}
		cfg.Clusters = []server.Cluster{{Name: "main", Endpoints: []string{etcd.Endpoint()}}}
	}
	cfg.Gateway.Auth.TokensFile = tokens
	for _, adjust := range s.adjust {
		adjust(&cfg)
	}
	srv, err := server.Start(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	g := &Gateway{Server: srv, URL: srv.URL(), Addr: srv.Addr(), Prefix: cfg.Prefix, HTTP: H2C()}
	g.Client = leasegatev1connect.NewLockServiceClient(g.HTTP, g.URL)
	return g, nil
}

// Stop shuts the gateway down gracefully: open waits end with unavailable
// (SHUTTING_DOWN) and their keys stay. Calling it twice is harmless. The
// harness's own idle connections are closed first, so the stop does not
// wait out HTTP/2's one-second GOAWAY grace for them.
func (g *Gateway) Stop() {
	g.HTTP.CloseIdleConnections()
	if g.Server != nil {
		_ = g.Server.Shutdown(context.Background())
		g.Server = nil
	}
}

// ConnectClient returns a Connect client of the lock service with opts
// (Bearer, interceptors).
func (g *Gateway) ConnectClient(opts ...connect.ClientOption) leasegatev1connect.LockServiceClient {
	return leasegatev1connect.NewLockServiceClient(g.HTTP, g.URL, opts...)
}

// SDK returns a Go SDK client of the gateway, closed at tb's cleanup.
func (g *Gateway) SDK(tb testing.TB, opts ...client.Option) *client.Client {
	tb.Helper()
	c, err := client.New([]string{g.URL}, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// H2C returns an HTTP client that speaks unencrypted HTTP/2 (h2c, with
// prior knowledge) to http:// URLs, as gRPC needs.
func H2C() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// Bearer sends token as a bearer token with every call, unary and
// streaming.
func Bearer(token string) connect.ClientOption {
	return connect.WithInterceptors(bearer(token))
}

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// SaidTwice returns the part of an error message that is said twice in a
// row ("permission denied: permission denied: …", "invalid argument:
// invalid_argument: …"), or "" when every part is said once. Parts are
// the ": "-separated pieces, compared without case and with '_' read as
// a space.
func SaidTwice(msg string) string {
	parts := strings.Split(msg, ": ")
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "_", " ")) }
	for i := 1; i < len(parts); i++ {
		if p := norm(parts[i]); p != "" && p == norm(parts[i-1]) {
			return parts[i]
		}
	}
	return ""
}
