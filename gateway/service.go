package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/queue"
)

// Service implements leasegate.v1.LockService over a locks.Router. Serve
// it through Handler, whose one interceptor turns the errors its handlers
// return into Connect errors (the REST API maps the same translation).
type Service struct {
	cfg    Config
	router *locks.Router
	log    *slog.Logger
	// restGrantHook, when set (by tests), runs as a waiting REST acquire's
	// grant is about to be written, with the request's context.
	restGrantHook func(context.Context)

	shutdownOnce sync.Once
	shutdown     chan struct{}
	// stopping ends when Shutdown runs, with errShuttingDown (and
	// queue.ErrDetached) as its cause; open waits are ended with it
	// through onStop.
	stopping context.Context
	stop     context.CancelCauseFunc
	stopMu   sync.Mutex
	onStops  map[*func(error)]struct{}

	health *Health

	auth *Authenticator
	lim  *limiter
	tel  *telemetry
	keys IDKeyring
	clk  clock.Clock

	routes []route // served beside the API (Handle)
}

var _ leasegatev1connect.LockServiceHandler = (*Service)(nil)

// NewService returns the lock service over router, which the caller keeps
// and closes. log may be nil.
func NewService(cfg Config, router *locks.Router, log *slog.Logger) (_ *Service, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	clk := cmp.Or(cfg.Clock, clock.Real)
	auth := cfg.Authenticator
	if auth == nil {
		if auth, err = NewAuthenticator(cfg.Auth, log, clk); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			auth.Close() // no JWKS refresh outlives a service that never ran
		}
	}()
	s := &Service{cfg: cfg, router: router, log: log, shutdown: make(chan struct{}), auth: auth, lim: newLimiter(cfg.Limits, clk), keys: cfg.IDKeys, clk: clk}
	s.stopping, s.stop = context.WithCancelCause(context.Background())
	s.onStops = map[*func(error)]struct{}{}
	s.health = &Health{svc: s}
	if s.keys == nil {
		k, err := GenerateIDKey(1)
		if err != nil {
			return nil, err
		}
		if s.keys, err = NewIDKeys(k); err != nil {
			return nil, err
		}
		log.Warn("lock and session ids are signed with a key of this process alone: no other gateway accepts them, nor this one after a restart")
	}
	if s.tel, err = newTelemetry(s, cfg.Telemetry); err != nil {
		return nil, err
	}
	return s, nil
}

// ReloadCredentials loads the tokens and JWT keys files again if they
// changed (see Authenticator.Reload). It blocks for the reads.
func (s *Service) ReloadCredentials() error { return s.auth.Reload() }

// Shutdown ends every open wait with unavailable (reason SHUTTING_DOWN)
// while keeping the waiters' keys, so clients resume their places on another
// gateway. Held locks live in etcd and are untouched; the JWKS refreshes
// stop. It does not block.
func (s *Service) Shutdown() {
	s.shutdownOnce.Do(func() {
		close(s.shutdown)
		cause := errors.Join(queue.ErrDetached, errShuttingDown)
		s.stopMu.Lock()
		s.stop(cause)
		for fn := range s.onStops {
			(*fn)(cause)
		}
		clear(s.onStops)
		s.stopMu.Unlock()
		s.auth.Close()
	})
}

// onStop has cancel called with the stop's cause when Shutdown runs,
// within Shutdown itself (at once if it has run): so every open wait's
// cause is the detach before Shutdown returns, and closing the
// connections after it cannot end a wait first with its caller's
// cancellation, which would take the waiter's key out of the queue
// instead of leaving it for a retry elsewhere. forget drops cancel.
func (s *Service) onStop(cancel func(error)) (forget func()) {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.stopping.Err() != nil {
		cancel(context.Cause(s.stopping))
		return func() {}
	}
	fn := &cancel
	s.onStops[fn] = struct{}{}
	return func() {
		s.stopMu.Lock()
		delete(s.onStops, fn)
		s.stopMu.Unlock()
	}
}

// withTimeout bounds ctx by d on the gateway's clock; the context ends with cause.
func (s *Service) withTimeout(ctx context.Context, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	return clock.WithTimeoutCause(ctx, s.clk, d, cause)
}

// ttl reads a TTL in milliseconds: queue.MinLeaseTTL to
// queue.MaxLeaseTTL, or 0 for the default when zeroIsDefault (a field with
// no default, the REST acquire's ttlMs, refuses 0 as below the range).
// Every refusal states the same allowed values.
func (s *Service) ttl(field string, ms int64, zeroIsDefault bool) (time.Duration, error) {
	lo, hi := queue.MinLeaseTTL.Milliseconds(), queue.MaxLeaseTTL.Milliseconds()
	want := fmt.Sprintf("%d to %d", lo, hi)
	if zeroIsDefault {
		want = fmt.Sprintf("0 (default %s) or %s", s.cfg.DefaultTTL, want)
	}
	switch {
	case ms == 0 && zeroIsDefault:
		return s.cfg.DefaultTTL, nil
	case ms < 0:
		return 0, badField(field, "%d is negative; want %s", ms, want)
	case ms > hi:
		return 0, badField(field, "%d is above %d (%s); want %s", ms, hi, queue.MaxLeaseTTL, want)
	case ms < lo:
		return 0, badField(field, "%d is below %d (%s, etcd's shortest lease); want %s", ms, lo, queue.MinLeaseTTL, want)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// acquireRequest authenticates the caller and reads the wire fields every
// acquire shares (acquireOf checks the rest by the engine's rules):
// milliseconds compared before they are converted, the session id, the
// default TTL and request id.
func (s *Service) acquireRequest(ctx context.Context, name string, ttlMs int64, clientID, requestID, sessionID string, limit int32, reentrant bool, lockDelayMs int64) (Identity, queue.AcquireRequest, *SessionID, error) {
	r := queue.AcquireRequest{Name: name, ClientID: clientID, RequestID: requestID, Limit: int(limit), Reentrant: reentrant,
		LockDelay: time.Duration(lockDelayMs) * time.Millisecond}
	who, err := s.caller(ctx)
	if err != nil {
		return who, r, nil, err
	}
	if lockDelayMs < 0 || lockDelayMs > v1.MaxLockDelayMs {
		return who, r, nil, badField("lock_delay_ms", "%d is outside 0 to %d", lockDelayMs, v1.MaxLockDelayMs)
	}
	if r.RequestID == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		r.RequestID = hex.EncodeToString(b[:])
	}
	if sessionID == "" {
		r.TTL, err = s.ttl("ttl_ms", ttlMs, true)
		return who, r, nil, err
	}
	id, err := DecodeSessionID(s.keys, sessionID)
	if err != nil {
		return who, r, nil, fieldOf("session_id", err)
	}
	r.SessionSecret = id.Secret
	return who, r, &id, nil
}

// acquireOf is the fleet's acquire of r (a campaign with election) for the
// caller. The engine's checks (locks.Acquire.Validate) come first, so a bad
// request is refused as such even while its cluster is down; then the
// tenant's policy, the session's tenant, the caps and the acquire rates.
func (s *Service) acquireOf(id Identity, r queue.AcquireRequest, sess *SessionID, election bool) (locks.Acquire, error) {
	a := locks.Acquire{Tenant: id.Tenant, Request: r, KeyCap: s.cfg.Limits.MaxKeysPerTenant, Election: election}
	if sess != nil {
		a.Session = sess
	}
	if err := a.Validate(); err != nil {
		return locks.Acquire{}, err
	}
	if err := s.allow(id, r.Name); err != nil {
		return locks.Acquire{}, err
	}
	if sess != nil && sess.Tenant != id.Tenant {
		return locks.Acquire{}, fmt.Errorf("%w: the session belongs to another tenant", queue.ErrNotOwner)
	}
	a.Request.MaxKeys = s.cfg.Limits.MaxWaitersPerName
	a.Request.Owner = id.owner()
	return a, s.lim.acquire(id)
}

func (s *Service) granted(id Identity, shard string, g queue.Grant) *v1.Granted {
	out := &v1.Granted{
		LockId:       EncodeLockID(s.keys, LockID{Tenant: id.Tenant, Shard: shard, Handle: g.Handle}),
		FencingToken: g.Token(),
		TtlMs:        g.TTL.Milliseconds(),
		Shard:        shard,
		HoldCount:    int32(max(g.Holds, 1)),
	}
	if !g.Deadline.IsZero() {
		// A session lock's deadline is its session's.
		out.ExpiresAt = timestamppb.New(g.Deadline)
		out.ValidForMs = max(g.Valid.Milliseconds(), 0)
	}
	return out
}

// Acquire streams queue positions until the caller is granted.
func (s *Service) Acquire(ctx context.Context, req *connect.Request[v1.AcquireRequest], stream *connect.ServerStream[v1.AcquireResponse]) error {
	m := req.Msg
	id, r, sess, err := s.acquireRequest(ctx, m.Name, m.TtlMs, m.ClientId, m.RequestId, m.SessionId, m.Limit, m.Reentrant, m.LockDelayMs)
	if err != nil {
		return err
	}
	return s.streamAcquire(ctx, id, r, sess, false, m.WaitTimeoutMs, acquireSink{
		queued: func(q *v1.Queued) error {
			return stream.Send(&v1.AcquireResponse{Event: &v1.AcquireResponse_Queued{Queued: q}})
		},
		granted: func(g *v1.Granted) error {
			return stream.Send(&v1.AcquireResponse{Event: &v1.AcquireResponse_Granted{Granted: g}})
		},
	})
}

// acquireSink writes the messages of a streaming acquire: LockService's
// Acquire and ElectionService's Campaign.
type acquireSink struct {
	queued  func(*v1.Queued) error
	granted func(*v1.Granted) error
}

// acquireStream writes one waiting Acquire's messages: its positions and
// heartbeats, from the engine's goroutines (the name's hub, the waiter's
// renewal timer), and its grant, from the handler. A stream takes one
// message at a time and none once its handler has returned, so every
// message goes out under mu, and the grant (or end, on any other end)
// closes the stream under it: a heartbeat due as the grant is written waits
// and then writes nothing. Each message must be written within SendTimeout
// (send), or the client is taken to be gone.
type acquireStream struct {
	send      func(func() error) error
	sink      acquireSink
	requestID string

	mu   sync.Mutex
	err  error // once set, nothing more is written, and this is the answer
	last int64 // the last position sent
}

// queued sends the position pos.
func (a *acquireStream) queued(pos int64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	a.last = pos
	a.err = a.send(func() error { return a.sink.queued(&v1.Queued{Position: pos, RequestId: a.requestID}) })
	return a.err
}

// heartbeat resends the last position before each renewal of the waiter's
// lease, so a lease is renewed only for a client that is reading; before the
// first position there is nothing to send (its first report is bounded).
func (a *acquireStream) heartbeat() error {
	a.mu.Lock()
	pos := a.last
	a.mu.Unlock()
	if pos == 0 {
		return nil
	}
	return a.queued(pos)
}

// granted sends the grant, the stream's last message.
func (a *acquireStream) granted(g *v1.Granted) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	err := a.send(func() error { return a.sink.granted(g) })
	a.err = errStreamEnded
	return err
}

// end closes the stream to every later message; the handler calls it
// before it returns.
func (a *acquireStream) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = errStreamEnded
	}
}

// streamAcquire runs a streaming acquire of r (a campaign with election):
// limits, the fleet's acquire with its positions and heartbeats, and the
// grant's delivery (given up when it does not reach the client).
func (s *Service) streamAcquire(ctx context.Context, id Identity, r queue.AcquireRequest, sess *SessionID, election bool, waitTimeoutMs int64, sink acquireSink) error {
	// Compare in milliseconds before converting: a huge value would
	// overflow the conversion and pass the check.
	if waitTimeoutMs < 0 || waitTimeoutMs > s.cfg.MaxWaitTimeout.Milliseconds() {
		return badField("wait_timeout_ms", "%d is outside 0 (wait until cancelled) to %d", waitTimeoutMs, s.cfg.MaxWaitTimeout.Milliseconds())
	}
	waitTimeout := time.Duration(waitTimeoutMs) * time.Millisecond
	a, err := s.acquireOf(id, r, sess, election)
	if err != nil {
		return err
	}
	endWait, err := s.lim.startWait(id)
	if err != nil {
		return err
	}
	defer endWait()

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if waitTimeout > 0 {
		// The wait timeout bounds the whole call, enqueue included, so a
		// stalled cluster cannot hold a caller past it.
		var stop context.CancelFunc
		wctx, stop = s.withTimeout(wctx, waitTimeout, queue.ErrWaitTimeout)
		defer stop()
	}
	defer s.onStop(cancel)()
	out := &acquireStream{send: func(fn func() error) error { return s.send(ctx, fn) }, sink: sink, requestID: r.RequestID}
	defer out.end()
	a.Request.OnQueued = func(pos int64) {
		if err := out.queued(pos); err != nil {
			cancel(err) // the client is gone: leave the queue
		}
	}
	a.Request.Heartbeat = func(context.Context) error { return out.heartbeat() }
	shard, g, err := s.router.Acquire(wctx, a)
	if err != nil {
		err = sessionShard(shard, s.lim.capped(err))
		if cause := context.Cause(wctx); cause != nil && errors.Is(cause, errShuttingDown) {
			return errShuttingDown
		}
		if errors.Is(context.Cause(wctx), queue.ErrWaitTimeout) {
			return fmt.Errorf("%w after %d ms", queue.ErrWaitTimeout, waitTimeoutMs)
		}
		return err
	}
	recordOf(ctx).setShard(shard)
	if err := out.granted(s.granted(id, shard, g)); err != nil {
		// The grant never reached the client: the stream is broken, so the
		// client saw an error, not this grant. Give the lock up rather than
		// leave a holder nobody serves. The give-up removes the key only
		// while this attempt owns it: a retry with the same request id
		// that took it over (and delivered the grant) keeps it.
		s.log.WarnContext(ctx, "grant not delivered; giving it up", "shard", shard, "fencing_token", g.Token(), "err", err)
		s.router.Abandon(ctx, id.Tenant, shard, g)
		return err
	}
	return nil
}

// TryAcquire grants the lock only if it is free.
func (s *Service) TryAcquire(ctx context.Context, req *connect.Request[v1.TryAcquireRequest]) (*connect.Response[v1.TryAcquireResponse], error) {
	m := req.Msg
	id, r, sess, err := s.acquireRequest(ctx, m.Name, m.TtlMs, m.ClientId, m.RequestId, m.SessionId, m.Limit, m.Reentrant, m.LockDelayMs)
	if err != nil {
		return nil, err
	}
	switch {
	case m.Election && !m.ExistingOnly:
		return nil, badField("election", "needs existing_only: an election is joined with Campaign")
	case m.ExistingOnly && m.RequestId == "":
		return nil, badField("request_id", "is empty; existing_only finds the grant made under a request id")
	}
	a, err := s.acquireOf(id, r, sess, m.Election)
	if err != nil {
		return nil, err
	}
	if m.ExistingOnly {
		shard, g, found, err := s.router.Existing(ctx, a)
		if err != nil {
			return nil, sessionShard(shard, err)
		}
		out := &v1.TryAcquireResponse{Acquired: found}
		if found {
			recordOf(ctx).setShard(shard)
			out.Granted = s.granted(id, shard, g)
		}
		return connect.NewResponse(out), nil
	}
	shard, res, err := s.router.TryAcquire(ctx, a)
	if err != nil {
		return nil, sessionShard(shard, s.lim.capped(err))
	}
	out := &v1.TryAcquireResponse{Acquired: res.Acquired}
	if res.Acquired {
		recordOf(ctx).setShard(shard)
		out.Granted = s.granted(id, shard, res.Grant)
	} else {
		recordOf(ctx).setOutcome("busy")
		if res.Holder != nil {
			out.HolderExpiresAt = timestamppb.New(res.Holder.Expires)
		}
		if !res.DelayedUntil.IsZero() {
			out.DelayUntil = timestamppb.New(res.DelayedUntil)
		}
	}
	return connect.NewResponse(out), nil
}

// held authenticates the caller, decodes a lock id, checks that it
// belongs to the caller's tenant, finds its shard, passes check (when not
// nil) and charges the call to the caller's renewal rates.
func (s *Service) held(ctx context.Context, lockID string, check func(locks.Held) error) (LockID, locks.Held, error) {
	who, err := s.caller(ctx)
	if err != nil {
		return LockID{}, locks.Held{}, err
	}
	id, err := DecodeLockID(s.keys, lockID)
	if err != nil {
		return id, locks.Held{}, fieldOf("lock_id", err)
	}
	if id.Tenant != who.Tenant {
		return id, locks.Held{}, fmt.Errorf("%w: the lock id belongs to another tenant", queue.ErrNotOwner)
	}
	h, err := s.router.Held(ctx, who.Tenant, id.Shard, id.Handle)
	if err == nil && check != nil {
		err = check(h)
	}
	if err != nil {
		return id, h, err
	}
	return id, h, s.lim.renew(who)
}

// Renew extends a held lock's lease.
func (s *Service) Renew(ctx context.Context, req *connect.Request[v1.RenewRequest]) (*connect.Response[v1.RenewResponse], error) {
	rn, err := s.renew(ctx, req.Msg.LockId, req.Msg.FencingToken, req.Msg.TtlMs)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&v1.RenewResponse{ExpiresAt: timestamppb.New(rn.Deadline), TtlMs: rn.TTL.Milliseconds(), ValidForMs: max(rn.Valid.Milliseconds(), 0)}), nil
}

func (s *Service) renew(ctx context.Context, lockID string, token, ttlMs int64) (queue.Renewal, error) {
	if _, err := s.ttl("ttl_ms", ttlMs, true); err != nil {
		return queue.Renewal{}, err
	}
	_, h, err := s.held(ctx, lockID, nil)
	if err != nil {
		return queue.Renewal{}, err
	}
	return h.Renew(ctx, token)
}

// Release frees a held lock; it is idempotent.
func (s *Service) Release(ctx context.Context, req *connect.Request[v1.ReleaseRequest]) (*connect.Response[v1.ReleaseResponse], error) {
	ok, err := s.release(ctx, req.Msg.LockId, req.Msg.FencingToken)
	if err != nil {
		return nil, err
	}
	if !ok {
		recordOf(ctx).setOutcome("not_held")
	}
	return connect.NewResponse(&v1.ReleaseResponse{Released: ok}), nil
}

func (s *Service) release(ctx context.Context, lockID string, token int64) (bool, error) {
	_, h, err := s.held(ctx, lockID, nil)
	if err != nil {
		return false, err
	}
	return h.Release(ctx, token)
}

// Describe reports a name's holder and queue.
func (s *Service) Describe(ctx context.Context, req *connect.Request[v1.DescribeRequest]) (*connect.Response[v1.DescribeResponse], error) {
	name := req.Msg.Name
	id, err := s.reader(ctx, name)
	if err != nil {
		return nil, err
	}
	shard, d, err := s.router.Describe(ctx, id.Tenant, name)
	if err != nil {
		return nil, err
	}
	out := &v1.DescribeResponse{Name: name, Shard: shard, Waiters: d.Waiters, Limit: int32(d.Limit)}
	if !d.DelayUntil.IsZero() {
		out.DelayUntil = timestamppb.New(d.DelayUntil)
	}
	for _, h := range d.Holders {
		out.Holders = append(out.Holders, &v1.Holder{ClientId: h.ClientID, ExpiresAt: timestamppb.New(h.Expires),
			FencingToken: h.Token, TtlMs: h.TTL.Milliseconds()})
	}
	if h := d.Holder; h != nil {
		out.Held, out.HolderClientId, out.HolderExpiresAt = true, h.ClientID, timestamppb.New(h.Expires)
		out.FencingToken, out.TtlMs = h.Token, h.TTL.Milliseconds()
	}
	return connect.NewResponse(out), nil
}

// CheckFence answers whether a token is the live holder's right now.
func (s *Service) CheckFence(ctx context.Context, req *connect.Request[v1.CheckFenceRequest]) (*connect.Response[v1.CheckFenceResponse], error) {
	name := req.Msg.Name
	if err := queue.ValidateName(name); err != nil {
		return nil, fieldOf("name", err)
	}
	if req.Msg.FencingToken <= 0 {
		return nil, badField("fencing_token", "%d is not positive", req.Msg.FencingToken)
	}
	id, err := s.admit(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.allow(id, name); err != nil {
		return nil, err
	}
	live, cur, err := s.router.CheckFence(ctx, id.Tenant, name, req.Msg.FencingToken)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&v1.CheckFenceResponse{Live: live, CurrentToken: cur}), nil
}
