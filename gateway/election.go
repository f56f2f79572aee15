package gateway

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/queue"
)

// Elections implements leasegate.v1.ElectionService over a Service: a
// campaign is an acquire in the election's own name (locks.Acquire.Election),
// so an election is served as a lock is, and its leader id is a lock id
// (LockService.Renew renews it). Handler serves it beside LockService.
type Elections struct{ s *Service }

var _ leasegatev1connect.ElectionServiceHandler = Elections{}

// Elections returns the election service over s.
func (s *Service) Elections() Elections { return Elections{s: s} }

// Campaign streams queue positions until the caller leads.
func (el Elections) Campaign(ctx context.Context, req *connect.Request[v1.CampaignRequest], stream *connect.ServerStream[v1.CampaignResponse]) error {
	s, m := el.s, req.Msg
	id, r, sess, err := s.acquireRequest(ctx, m.Name, m.TtlMs, m.ClientId, m.RequestId, m.SessionId, 0, false, 0)
	if err != nil {
		return err
	}
	r.Value = m.Value
	return s.streamAcquire(ctx, id, r, sess, true, m.WaitTimeoutMs, acquireSink{
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

// leader is Service.held for a leader id: it must name an election.
func (el Elections) leader(ctx context.Context, leaderID string) (LockID, locks.Held, error) {
	id, t, err := el.s.held(ctx, leaderID, func(t locks.Held) error {
		if !t.Election() {
			return badField("leader_id", "names a lock, not an election's leader; use LockService")
		}
		return nil
	})
	if fe := (*fieldError)(nil); errors.As(err, &fe) && fe.field != "leader_id" {
		// The message names the field as the detail does.
		fe.err = renamedField{"leader_id: " + strings.TrimPrefix(fe.err.Error(), fe.field+": "), fe.err}
		fe.field = "leader_id"
	}
	return id, t, err
}

// renamedField is a field error's cause under the caller's field name.
type renamedField struct {
	msg string
	err error
}

func (e renamedField) Error() string { return e.msg }
func (e renamedField) Unwrap() error { return e.err }

// Proclaim replaces the leader's value while the caller leads.
func (el Elections) Proclaim(ctx context.Context, req *connect.Request[v1.ProclaimRequest]) (*connect.Response[v1.ProclaimResponse], error) {
	// Here, not left to the engine: it checks behind the shard's breaker.
	if len(req.Msg.Value) > queue.MaxValueLen {
		return nil, badField("value", "is %d bytes; the limit is %d", len(req.Msg.Value), queue.MaxValueLen)
	}
	_, h, err := el.leader(ctx, req.Msg.LeaderId)
	if err != nil {
		return nil, err
	}
	if err := h.Proclaim(ctx, req.Msg.Value); err != nil {
		return nil, err
	}
	return connect.NewResponse(&v1.ProclaimResponse{}), nil
}

// Resign ends the caller's term; it is idempotent.
func (el Elections) Resign(ctx context.Context, req *connect.Request[v1.ResignRequest]) (*connect.Response[v1.ResignResponse], error) {
	id, h, err := el.leader(ctx, req.Msg.LeaderId)
	if err != nil {
		return nil, err
	}
	ok, err := h.Release(ctx, id.Handle.Token())
	if err != nil {
		return nil, err
	}
	if !ok {
		recordOf(ctx).setOutcome("not_held")
	}
	return connect.NewResponse(&v1.ResignResponse{Resigned: ok}), nil
}

// Leader reports the election's leader, or not_found.
func (el Elections) Leader(ctx context.Context, req *connect.Request[v1.LeaderRequest]) (*connect.Response[v1.LeaderResponse], error) {
	id, err := el.s.reader(ctx, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	l, err := el.s.router.Leader(ctx, id.Tenant, req.Msg.Name)
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

// Observe streams the election's leader now and every change after (not a
// state equal to the last sent), across shard-map changes and resharding
// handovers. It counts as one of the tenant's open waits, and ends with
// unavailable (SHUTTING_DOWN) when the gateway shuts down.
func (el Elections) Observe(ctx context.Context, req *connect.Request[v1.ObserveRequest], stream *connect.ServerStream[v1.ObserveResponse]) error {
	s := el.s
	id, err := s.reader(ctx, req.Msg.Name)
	if err != nil {
		return err
	}
	observe, err := s.router.Observe(ctx, id.Tenant, req.Msg.Name)
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
	defer s.onStop(func(error) { cancel(errShuttingDown) })()
	var last *v1.Leader
	sent := false
	err = observe(octx, func(l *queue.Leader) error {
		m := leaderMsg(l)
		if sent && proto.Equal(m, last) {
			return nil
		}
		last, sent = m, true
		return s.send(ctx, func() error { return stream.Send(&v1.ObserveResponse{Leader: m}) })
	})
	if errors.Is(context.Cause(octx), errShuttingDown) {
		return errShuttingDown
	}
	return err
}
