package client

import (
	"context"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

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
	if err := cfg.validate(endpoints); err != nil {
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

// serviceOf is ep's client of the service S.
func serviceOf[S any](ep endpoint) S {
	var svc any = ep.rpc
	switch any((*S)(nil)).(type) {
	case *leasegatev1connect.ElectionServiceClient:
		svc = ep.elect
	case *leasegatev1connect.AdminServiceClient:
		svc = ep.admin
	}
	return svc.(S)
}

// failed moves calls to the endpoint after i, unless another call already
// moved them.
func (c *Client) failed(i int) {
	c.cur.CompareAndSwap(uint32(i), uint32((i+1)%len(c.eps)))
}

// backoff yields jittered, exponentially growing pauses between retries.
type backoff struct {
	initial, max, cur time.Duration
}

func (c *Client) newBackoff() *backoff {
	return &backoff{initial: c.cfg.backoffInitial, max: c.cfg.backoffMax}
}

// next returns the pause before the next retry: between half and all of a
// nominal value that doubles per call up to max.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.initial
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

func (b *backoff) reset() { b.cur = 0 }

// rpcFunc is one attempt of a call against one gateway.
type rpcFunc func(ctx context.Context, rpc leasegatev1connect.LockServiceClient) error

// call runs fn against the current endpoint and, while failures are
// retryable, against the next ones: at most max(3, endpoints) attempts,
// each bounded by the request timeout. It pauses (backoff) only after
// trying every endpoint once, since a different gateway may answer at once.
//
// A rate-limited attempt is retried on the same gateway after the delay the
// gateway asked for (its RetryInfo) instead of the backoff, within the same
// attempts: another gateway would only dodge the tenant's budget. When that
// delay would outlast ctx, call returns the *RateLimitError at once.
func (c *Client) call(ctx context.Context, op string, fn rpcFunc) error {
	attempts := max(3, len(c.eps))
	bo := c.newBackoff()
	var last error
	var pause time.Duration // a rate limit's delay before the next attempt
	for a := 0; a < attempts; a++ {
		if pause == 0 && a > 0 && a%len(c.eps) == 0 {
			pause = bo.next()
		}
		if pause > 0 {
			if err := sleep(ctx, c.cfg.clock, pause); err != nil {
				return &opError{op: op, kind: err, cause: last}
			}
			pause = 0
		}
		err := c.attempt(ctx, c.cfg.requestTimeout, fn)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return &opError{op: op, kind: ctx.Err(), cause: err}
		}
		if rl := rateLimited(err); rl != nil {
			d, ok := c.rateLimitPause(ctx, rl, time.Time{}, bo)
			if !ok {
				return wrap(op, err)
			}
			pause, last = d, err
			continue
		}
		if !retryable(err) {
			return wrap(op, err)
		}
		last = err
	}
	if rateLimited(last) != nil {
		return wrap(op, last)
	}
	if Reason(last) == ReasonShardUnavailable {
		// A gateway answered: its etcd cluster, not the gateway, is down.
		return &opError{op: op, kind: errShardDown, cause: last}
	}
	return &opError{op: op, kind: ErrUnavailable, cause: last}
}

// unary is call of one method of a gateway service S (its lock, election
// or admin client) with req: it returns the answer and when the attempt
// answered was sent.
func unary[S, Req, Resp any](ctx context.Context, c *Client, op string, req *Req,
	method func(S, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) (resp *Resp, sent time.Time, err error) {
	err = c.call(ctx, op, func(ctx context.Context, rpc leasegatev1connect.LockServiceClient) error {
		sent = c.cfg.clock.Now()
		r, err := method(serviceOf[S](c.endpointOf(rpc)), ctx, connect.NewRequest(req))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	return resp, sent, err
}

// renewCall is call of renew, a lease's renewal: its answer and when the
// attempt answered was sent.
func (c *Client) renewCall(ctx context.Context, op string, renew func(context.Context, leasegatev1connect.LockServiceClient) (confirmation, error)) (r renewResult) {
	r.err = c.call(ctx, op, func(ctx context.Context, rpc leasegatev1connect.LockServiceClient) error {
		r.sent = c.cfg.clock.Now()
		var err error
		r.confirmation, err = renew(ctx, rpc)
		return err
	})
	return r
}

// errShardDown is ErrUnavailable when the gateways answer but the name's
// etcd cluster (its shard) does not: saying no gateway is available would
// send the operator to look at the wrong thing.
var errShardDown error = unavailableKind("the gateway answers, but the name's shard does not")

// unavailableKind is an error that is ErrUnavailable with its own words.
type unavailableKind string

func (k unavailableKind) Error() string { return string(k) }

// Is makes errors.Is(err, ErrUnavailable) hold.
func (k unavailableKind) Is(target error) bool { return target == ErrUnavailable }

// attempt runs fn once on the current endpoint, bounded by timeout on the
// client's clock, and moves on to the next endpoint if it fails retryably.
func (c *Client) attempt(ctx context.Context, timeout time.Duration, fn rpcFunc) error {
	i, ep := c.pick()
	actx, cancel := withTimeout(ctx, c.cfg.clock, timeout)
	defer cancel()
	err := fn(actx, ep.rpc)
	if err != nil && retryable(err) {
		c.failed(i)
	}
	return err
}

// follow keeps a server stream open and hands each of its messages to
// recv, until ctx ends (ctx's error), recv fails (its error), or stop turns
// a stream's failure into an error to return (stop sees nil when the
// stream ended cleanly). Any other end opens the stream again with open on
// the next endpoint, after a backoff that each delivered message resets.
func follow[M any](ctx context.Context, c *Client, open func(context.Context, endpoint) (*connect.ServerStreamForClient[M], error),
	recv func(*M) error, stop func(error) error) error {
	bo := c.newBackoff()
	for {
		i, ep := c.pick()
		stream, err := open(ctx, ep)
		if err == nil {
			for stream.Receive() {
				bo.reset()
				if rerr := recv(stream.Msg()); rerr != nil {
					stream.Close()
					return rerr
				}
			}
			err = stream.Err()
			stream.Close()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if serr := stop(err); serr != nil {
			return serr
		}
		c.failed(i)
		if serr := sleep(ctx, c.cfg.clock, bo.next()); serr != nil {
			return serr
		}
	}
}
