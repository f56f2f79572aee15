package client

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// Protocol is the wire protocol the SDK speaks to gateways.
type Protocol int

const (
	// ProtocolConnect is the Connect protocol (the default). It works over
	// HTTP/1.1 and HTTP/2.
	ProtocolConnect Protocol = iota
	// ProtocolGRPC is gRPC; it needs HTTP/2 (the default HTTP client
	// speaks HTTP/2 without TLS to http:// endpoints).
	ProtocolGRPC
	// ProtocolGRPCWeb is gRPC-Web.
	ProtocolGRPCWeb
)

// String returns the protocol's name: connect, grpc or grpcweb.
func (p Protocol) String() string {
	switch p {
	case ProtocolConnect:
		return "connect"
	case ProtocolGRPC:
		return "grpc"
	case ProtocolGRPCWeb:
		return "grpcweb"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// Option configures a Client. Options are applied in order by New.
type Option interface{ applyClient(*config) }

type optionFunc func(*config)

func (f optionFunc) applyClient(c *config) { f(c) }

// config is a Client's settings; the zero value of no field is used.
type config struct {
	httpClient     *http.Client
	ownHTTP        bool
	protocol       Protocol
	clientID       string
	clock          Clock
	renewFraction  float64
	margin         time.Duration // < 0: the default TTL/100 + 100 ms
	backoffInitial time.Duration
	backoffMax     time.Duration
	requestTimeout time.Duration
	maxRenewals    int
	onRenew        func(sent time.Time, err error)
	tracing        bool
	tracerProvider trace.TracerProvider // nil: the global one
	tokens         TokenSource          // nil: no credentials
	staticToken    string               // WithBearerToken's, checked by validateAuth
	hasStatic      bool
	tlsConfig      *tls.Config
	interceptors   []connect.Interceptor
	holdWatch      time.Duration // < 0: off
}

func defaultConfig() config {
	return config{
		protocol:       ProtocolConnect,
		clientID:       defaultClientID(),
		clock:          RealClock,
		renewFraction:  1.0 / 3,
		margin:         -1,
		backoffInitial: 100 * time.Millisecond,
		backoffMax:     2 * time.Second,
		requestTimeout: 10 * time.Second,
		maxRenewals:    DefaultMaxRenewals,
		holdWatch:      DefaultHoldWatchAfter,
	}
}

// validate checks the options, then that there are endpoints, then the
// credential and TLS options against them.
func (c *config) validate(endpoints []string) error {
	switch {
	case c.protocol < ProtocolConnect || c.protocol > ProtocolGRPCWeb:
		return fmt.Errorf("protocol %d: want ProtocolConnect, ProtocolGRPC or ProtocolGRPCWeb", int(c.protocol))
	case len(c.clientID) > v1.MaxIDBytes:
		return fmt.Errorf("client id is %d bytes; the limit is %d", len(c.clientID), v1.MaxIDBytes)
	case strings.IndexFunc(c.clientID, func(r rune) bool { return !unicode.IsPrint(r) || r == utf8.RuneError }) >= 0:
		return fmt.Errorf("client id %q has a control or non-printable character; allowed: printable UTF-8 and plain spaces (the gateway refuses others)", c.clientID)
	case c.clock == nil:
		return fmt.Errorf("clock is nil")
	case c.renewFraction <= 0 || c.renewFraction > 0.5:
		return fmt.Errorf("renew fraction %g is outside (0, 0.5]", c.renewFraction)
	case c.backoffInitial <= 0 || c.backoffMax < c.backoffInitial:
		return fmt.Errorf("retry backoff %s..%s: want 0 < initial <= max", c.backoffInitial, c.backoffMax)
	case c.requestTimeout <= 0:
		return fmt.Errorf("request timeout %s must be positive", c.requestTimeout)
	case c.maxRenewals < 1:
		return fmt.Errorf("max renewals in flight %d: want at least 1", c.maxRenewals)
	case len(endpoints) == 0:
		return fmt.Errorf("no endpoints; want at least one gateway URL such as http://127.0.0.1:7070")
	}
	return c.validateAuth(endpoints)
}

func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	id := fmt.Sprintf("%s:%d", host, os.Getpid())
	if len(id) > v1.MaxIDBytes {
		id = id[len(id)-v1.MaxIDBytes:]
	}
	return id
}

// defaultHTTPClient speaks HTTP/2 to every endpoint: with TLS to https://
// URLs and without (h2c, prior knowledge) to http:// URLs, as gRPC
// streaming needs. It pings idle connections so a dead gateway under a long
// wait is noticed within seconds rather than at the kernel's TCP timeout.
func defaultHTTPClient() *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:           &p,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 10 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}}
}

// WithHTTPClient sets the HTTP client for every call. Default: a client
// that speaks HTTP/2 to https:// endpoints and unencrypted HTTP/2 (h2c) to
// http:// endpoints, so gRPC and streaming work against a plain-HTTP
// gateway, with 5 s dial and TLS timeouts and HTTP/2 pings every 10 s of
// silence. Client.Close closes the idle connections only of the default.
// WithBearerToken, WithTokenSource and WithInterceptors apply to hc too;
// WithTLSConfig cannot be combined with it (New fails).
func WithHTTPClient(hc *http.Client) Option {
	return optionFunc(func(c *config) { c.httpClient = hc })
}

// WithProtocol sets the wire protocol. Default ProtocolConnect.
func WithProtocol(p Protocol) Option {
	return optionFunc(func(c *config) { c.protocol = p })
}

// WithClientID sets the identity the gateway reports as a holder in
// Describe (up to 128 bytes). Default "<hostname>:<pid>".
func WithClientID(id string) Option {
	return optionFunc(func(c *config) { c.clientID = id })
}

// WithClock sets the time source of renew schedules, lock and session
// deadlines, backoff, wait timeouts and per-attempt timeouts. Default
// RealClock.
func WithClock(clk Clock) Option {
	return optionFunc(func(c *config) { c.clock = clk })
}

// DefaultHoldWatchAfter is WithHoldWatch's default.
const DefaultHoldWatchAfter = time.Second

// WithHoldWatch sets how long a lock is held before the SDK opens a watch
// of it on a gateway (LockService.WatchHold), so that an eviction by an
// administrator, or a loss another gateway saw, ends the lock's Context at
// once rather than at its next renewal. The watch costs the gateway one
// stream while the lock is held and etcd nothing; a lock released sooner
// never opens one. A negative d turns the watch off: losses are then
// learnt at renewals. Default DefaultHoldWatchAfter (1 s).
func WithHoldWatch(d time.Duration) Option {
	return optionFunc(func(c *config) { c.holdWatch = d })
}

// WithRenewFraction sets how often a held lock (or a session) is renewed,
// as a fraction of its TTL: every TTL×f, ±10% jitter, measured from when
// the previous confirmation was sent. f must be in (0, 0.5]. Default 1/3.
func WithRenewFraction(f float64) Option {
	return optionFunc(func(c *config) { c.renewFraction = f })
}

// WithSafetyMargin sets how long before the lease's conservative expiry a
// lock's Context is cancelled (see the package documentation). It is
// capped at TTL/3; a negative d means 0. Default TTL/100 + 100 ms, which covers clock-rate drift
// between this process and etcd (1% is far above real drift) and the
// delay between the cancel and your code noticing it.
func WithSafetyMargin(d time.Duration) Option {
	return optionFunc(func(c *config) { c.margin = max(d, 0) })
}

// WithRetryBackoff sets the pause between retries of a failed call: it
// starts at initial, doubles per consecutive failure up to max, and is
// jittered (each pause is between half and all of the nominal value).
// Default 100 ms up to 2 s.
func WithRetryBackoff(initial, max time.Duration) Option {
	return optionFunc(func(c *config) { c.backoffInitial, c.backoffMax = initial, max })
}

// WithRequestTimeout bounds each attempt of a unary call (TryAcquire,
// Release, Describe, sessions) on one endpoint before the SDK tries the
// next. Renewals use the smaller of this and TTL/4, counted from when a
// renewal is admitted (see WithMaxRenewals). The streaming Acquire
// has no per-attempt bound: its wait is bounded by WithWaitTimeout and the
// caller's context. Default 10 s.
func WithRequestTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.requestTimeout = d })
}

// WithOnRenew makes fn observe every renewal of a lock's lease and every
// keepalive of a session once the Client has processed it: the lock's
// deadline (Expires) already counts from it, or its loss is already
// declared. fn gets the time the request was sent (on the Client's Clock)
// and its error, nil when the gateway confirmed the lease; a session's
// keepalive that left a shard's lease unconfirmed reports an error naming
// the shards. fn runs on the renewer's goroutine and must not block for
// long: that lease's next renewal waits for it. Default: none.
func WithOnRenew(fn func(sent time.Time, err error)) Option {
	return optionFunc(func(c *config) { c.onRenew = fn })
}

// DefaultMaxRenewals is how many scheduled lock renewals one Client has in
// flight at most unless WithMaxRenewals says otherwise: well under the
// gateway's default of 1,000 concurrent streams per HTTP/2 connection, and
// 256 renewals in flight at a 10 ms round trip are 25,600 a second.
const DefaultMaxRenewals = 256

// WithMaxRenewals bounds the scheduled renewals of per-lock leases that the
// Client has in flight at once (default DefaultMaxRenewals). Renewals due
// beyond it wait, and the ones whose lease is closest to its deadline go
// first. Without a bound, a process holding thousands of per-lock leases
// floods a slow gateway with thousands of requests and connections at
// once, every renewal misses its timeout, and every lock is lost together
// (docs/capacity.md). Raise it for a gateway far away: each renewal holds
// its turn for a round trip. n must be at least 1.
func WithMaxRenewals(n int) Option {
	return optionFunc(func(c *config) { c.maxRenewals = n })
}

// marginFor is the safety margin of a lease with the given TTL.
func (c *config) marginFor(ttl time.Duration) time.Duration {
	m := c.margin
	if m < 0 {
		m = ttl/100 + 100*time.Millisecond
	}
	return min(m, ttl/3)
}
