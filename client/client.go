package client

import (
	"net/url"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Client talks to one or more leasegate gateways. Every gateway serves
// every call, so the client keeps using one endpoint until a call to it
// fails retryably and then moves to the next, round robin. A Client is safe
// for concurrent use; make one per process and share it.
type Client struct {
	cfg    config
	renews *renewGate // the scheduled renewals in flight
	eps    []endpoint
	cur    atomic.Uint32
	closed atomic.Bool
}

type endpoint struct {
	url   string
	rpc   leasegatev1connect.LockServiceClient
	elect leasegatev1connect.ElectionServiceClient
	admin leasegatev1connect.AdminServiceClient
}

// New returns a client for the gateways at endpoints, base URLs such as
// "http://127.0.0.1:7070". It does not dial: connections are opened by the
// first calls. It fails with ErrInvalidArgument on an empty list, a URL
// that is not http:// or https://, or an invalid option.
func New(endpoints []string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.applyClient(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, &opError{op: "new client", kind: ErrInvalidArgument, cause: err}
	}
	if len(endpoints) == 0 {
		return nil, invalid("new client", "no endpoints; want at least one gateway URL such as http://127.0.0.1:7070")
	}
	if err := cfg.validateAuth(endpoints); err != nil {
		return nil, &opError{op: "new client", kind: ErrInvalidArgument, cause: err}
	}
	switch {
	case cfg.httpClient != nil:
	case cfg.tlsConfig != nil:
		cfg.httpClient, cfg.ownHTTP = tlsHTTPClient(cfg.tlsConfig), true
	default:
		cfg.httpClient, cfg.ownHTTP = defaultHTTPClient(), true
	}
	var copts []connect.ClientOption
	switch cfg.protocol {
	case ProtocolGRPC:
		copts = append(copts, connect.WithGRPC())
	case ProtocolGRPCWeb:
		copts = append(copts, connect.WithGRPCWeb())
	}
	topts, err := cfg.tracingOptions()
	if err != nil {
		return nil, &opError{op: "new client", kind: ErrInvalidArgument, cause: err}
	}
	copts = append(copts, topts...)
	copts = append(copts, cfg.interceptorOptions()...)
	c := &Client{cfg: cfg, renews: newRenewGate(cfg.maxRenewals)}
	for _, raw := range endpoints {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, invalid("new client", "endpoint %q: want an http:// or https:// URL with a host", raw)
		}
		base := strings.TrimSuffix(raw, "/")
		c.eps = append(c.eps, endpoint{url: base,
			rpc:   leasegatev1connect.NewLockServiceClient(cfg.httpClient, base, copts...),
			elect: leasegatev1connect.NewElectionServiceClient(cfg.httpClient, base, copts...),
			admin: leasegatev1connect.NewAdminServiceClient(cfg.httpClient, base, copts...)})
	}
	return c, nil
}

// Endpoints returns the gateway URLs the client was made with.
func (c *Client) Endpoints() []string {
	out := make([]string, len(c.eps))
	for i, ep := range c.eps {
		out[i] = ep.url
	}
	return out
}

// RenewalsWaiting is how many of c's lock renewals are due but wait for
// their turn because WithMaxRenewals are in flight. A count that stays
// above zero says the bound is low for the gateway's latency: the waiting
// leases come closer to their deadlines. It does not block.
func (c *Client) RenewalsWaiting() int { return c.renews.waitingCount() }

// Close closes the default HTTP client's idle connections, and makes later
// Acquire, TryAcquire and OpenSession calls fail with ErrClosed. It does
// not release locks or close sessions, and those keep renewing: release
// them first. It does not block and is idempotent.
func (c *Client) Close() error {
	c.closed.Store(true)
	if c.cfg.ownHTTP {
		c.cfg.httpClient.CloseIdleConnections()
	}
	return nil
}

func (c *Client) checkOpen(op string) error {
	if c.closed.Load() {
		return &opError{op: op, kind: ErrClosed}
	}
	return nil
}

// pick returns the endpoint calls currently go to.
func (c *Client) pick() (int, endpoint) {
	i := int(c.cur.Load()) % len(c.eps)
	return i, c.eps[i]
}

// endpointOf is the endpoint whose lock client is rpc (as call passes it).
func (c *Client) endpointOf(rpc leasegatev1connect.LockServiceClient) endpoint {
	for _, ep := range c.eps {
		if ep.rpc == rpc {
			return ep
		}
	}
	return c.eps[0]
}

// failed moves calls to the endpoint after i, unless another call already
// moved them.
func (c *Client) failed(i int) {
	c.cur.CompareAndSwap(uint32(i), uint32((i+1)%len(c.eps)))
}
