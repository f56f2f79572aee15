package gateway

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/queue"
)

// Elections implements leasegate.v1.ElectionService over a Service: a
// campaign is an acquire of queue.ElectionName(name), so an election is
// routed, limited, authenticated, recorded and translated as a lock is,
// and its leader id is a lock id (LockService.Renew renews it). Handler
// serves it beside LockService.
type Elections struct{ s *Service }

var _ leasegatev1connect.ElectionServiceHandler = Elections{}

// Elections returns the election service over s.
func (s *Service) Elections() Elections { return Elections{s: s} }

// Campaign streams queue positions until the caller leads.
func (el Elections) Campaign(ctx context.Context, req *connect.Request[v1.CampaignRequest], stream *connect.ServerStream[v1.CampaignResponse]) error {
	s, m := el.s, req.Msg
	id, err := s.caller(ctx)
	if err != nil {
		return err
	}
	if len(m.Value) > queue.MaxValueLen {
		return badField("value", "is %d bytes; the limit is %d", len(m.Value), queue.MaxValueLen)
	}
	r, sess, err := s.acquireRequest(m.Name, m.TtlMs, m.ClientId, m.RequestId, m.SessionId, 0, false, 0)
	if err != nil {
		return err
	}
	r.Name, r.Value = queue.ElectionName(m.Name), m.Value
	return s.streamAcquire(ctx, id, r, sess, m.WaitTimeoutMs, acquireSink{
		queued: func(q *v1.Queued) error {
			return stream.Send(&v1.CampaignResponse{Event: &v1.CampaignResponse_Queued{Queued: q}})
		},
		granted: func(g *v1.Granted) error {
			return stream.Send(&v1.CampaignResponse{Event: &v1.CampaignResponse_Elected{Elected: &v1.Elected{
				LeaderId: g.LockId, FencingToken: g.FencingToken, ExpiresAt: g.ExpiresAt,
				TtlMs: g.TtlMs, Shard: g.Shard, ValidForMs: g.ValidForMs,
			}}})
		},
	})
}

// leaderTarget is lockTarget for a leader id: it must name an election.
func (el Elections) leaderTarget(ctx context.Context, leaderID string) (LockID, locks.Target, error) {
	id, t, err := el.s.lockTarget(ctx, leaderID)
	var fe *fieldError
	if errors.As(err, &fe) {
		fe.field = "leader_id"
	}
	if err != nil {
		return id, t, err
	}
	if _, ok := queue.ElectionOf(id.Handle.Name); !ok {
		return id, t, badField("leader_id", "names a lock, not an election's leader; use LockService")
	}
	who, _ := el.s.caller(ctx) // lockTarget has authenticated the call
	return id, t, el.s.lim.renew(who)
}

// Proclaim replaces the leader's value while the caller leads.
func (el Elections) Proclaim(ctx context.Context, req *connect.Request[v1.ProclaimRequest]) (*connect.Response[v1.ProclaimResponse], error) {
	if len(req.Msg.Value) > queue.MaxValueLen {
		return nil, badField("value", "is %d bytes; the limit is %d", len(req.Msg.Value), queue.MaxValueLen)
	}
	id, t, err := el.leaderTarget(ctx, req.Msg.LeaderId)
	if err != nil {
		return nil, err
	}
	ctx, cancel := el.s.storeTimeout(ctx)
	defer cancel()
	err = call(ctx, t, func(ctx context.Context) error {
		return t.Engine.Proclaim(ctx, id.Handle, req.Msg.Value)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&v1.ProclaimResponse{}), nil
}

// Resign ends the caller's term; it is idempotent.
func (el Elections) Resign(ctx context.Context, req *connect.Request[v1.ResignRequest]) (*connect.Response[v1.ResignResponse], error) {
	id, t, err := el.leaderTarget(ctx, req.Msg.LeaderId)
	if err != nil {
		return nil, err
	}
	ctx, cancel := el.s.storeTimeout(ctx)
	defer cancel()
	var ok bool
	err = freeing(ctx, t, func(ctx context.Context) error {
		var err error
		ok, err = t.Engine.Release(ctx, id.Handle, id.Handle.Token())
		return err
	})
	if err != nil {
		return nil, err
	}
	if !ok {
		recordOf(ctx).setOutcome("not_held")
	}
	return connect.NewResponse(&v1.ResignResponse{Resigned: ok}), nil
}

// electionTarget validates an election name and routes it for the caller.
func (el Elections) electionTarget(ctx context.Context, name string) (Identity, locks.Target, error) {
	if err := queue.ValidateName(name); err != nil {
		return Identity{}, locks.Target{}, fieldOf("name", err)
	}
	id, err := el.s.caller(ctx)
	if err != nil {
		return id, locks.Target{}, err
	}
	if err := el.s.lim.acquire(id); err != nil {
		return id, locks.Target{}, err
	}
	t, err := el.s.route(ctx, id, queue.ElectionName(name))
	return id, t, err
}

// Leader reports the election's leader, or not_found.
func (el Elections) Leader(ctx context.Context, req *connect.Request[v1.LeaderRequest]) (*connect.Response[v1.LeaderResponse], error) {
	_, t, err := el.electionTarget(ctx, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := el.s.storeTimeout(ctx)
	defer cancel()
	var l *queue.Leader
	for _, c := range []*locks.Target{t.Previous, &t} {
		if c == nil {
			continue
		}
		// While the name drains from its previous shard, its leader may
		// still be there; nobody leads on the new one before it has let go.
		err = call(ctx, *c, func(ctx context.Context) error {
			var err error
			l, err = c.Engine.Leader(ctx, req.Msg.Name)
			return err
		})
		if !errors.Is(err, queue.ErrNoLeader) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&v1.LeaderResponse{Leader: leaderMsg(l)}), nil
}

func leaderMsg(l *queue.Leader) *v1.Leader {
	if l == nil {
		return nil
	}
	return &v1.Leader{Value: l.Value, FencingToken: l.Token, ClientId: l.ClientID}
}

// Observe streams the election's leader now and every change after. It
// counts as one of the tenant's open waits while it runs, and ends with
// unavailable (SHUTTING_DOWN) when the gateway shuts down.
//
// It follows the name across shard-map changes: whenever the router applies
// a new map it routes the name again and observes where it lives now. While
// the name drains from its previous shard, the leader is there until that
// shard has no key of the election left (a campaigner on the new shard is
// elected only then), so it observes the previous shard until it reports
// nobody, then the new one. A state equal to the last one sent is not sent
// again.
func (el Elections) Observe(ctx context.Context, req *connect.Request[v1.ObserveRequest], stream *connect.ServerStream[v1.ObserveResponse]) error {
	s := el.s
	changed := s.router.Changed() // before routing: a map applied in between re-routes
	id, t, err := el.electionTarget(ctx, req.Msg.Name)
	if err != nil {
		return err
	}
	endWait, err := s.lim.startWait(id)
	if err != nil {
		return err
	}
	defer endWait()
	octx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-s.shutdown:
			cancel(errShuttingDown)
		case <-octx.Done():
		}
	}()
	var last *v1.Leader
	sent := false
	send := func(l *queue.Leader) error {
		m := leaderMsg(l)
		if sent && proto.Equal(m, last) {
			return nil
		}
		last, sent = m, true
		return s.send(ctx, func() error { return stream.Send(&v1.ObserveResponse{Leader: m}) })
	}
	for {
		err = el.observeTarget(octx, t, req.Msg.Name, changed, send)
		if errors.Is(err, queue.ErrClosed) && octx.Err() == nil {
			// The shard's engine closed: the map that removed it is
			// being applied.
			select {
			case <-changed:
				err = errRouteChanged
			case <-octx.Done():
			}
		}
		if !errors.Is(err, errRouteChanged) || octx.Err() != nil {
			break
		}
		changed = s.router.Changed()
		if t, err = s.route(octx, id, queue.ElectionName(req.Msg.Name)); err != nil {
			break
		}
	}
	if errors.Is(context.Cause(octx), errShuttingDown) {
		return errShuttingDown
	}
	return err
}

// errRouteChanged ends an observation of one target: the shard map changed.
var errRouteChanged = errors.New("the shard map changed")

// errDrained ends an observation of a draining shard: nobody leads there.
var errDrained = errors.New("the previous shard has no leader")

// observeTarget observes name on t (its previous shard first, while one
// leads there) until ctx ends, send fails or changed closes
// (errRouteChanged).
func (el Elections) observeTarget(ctx context.Context, t locks.Target, name string, changed <-chan struct{}, send func(*queue.Leader) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-changed:
			cancel(errRouteChanged)
		case <-stop:
		}
	}()
	if p := t.Previous; p != nil {
		err := p.Engine.Observe(ctx, name, func(l *queue.Leader) error {
			if l == nil {
				return errDrained
			}
			return send(l)
		})
		if !errors.Is(err, errDrained) {
			return causeOr(ctx, err)
		}
	}
	return causeOr(ctx, t.Engine.Observe(ctx, name, send))
}

// causeOr is ctx's cause once ctx has ended, err otherwise.
func causeOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}
