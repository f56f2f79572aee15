package gateway

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// WatchHold tells a holder how its lock ended, as soon as this gateway's
// engine learns of it (queue.Engine.AwaitEnd): an eviction or a loss,
// whichever gateway saw it. It costs the gateway a stream and no etcd work
// while the lock is held; the renewal rate limit admits it, and only a
// caller that holds the lock's id can open it. A gateway shutting down ends
// it with SHUTTING_DOWN, for the SDK to watch on through another.
func (s *Service) WatchHold(ctx context.Context, req *connect.Request[v1.WatchHoldRequest], stream *connect.ServerStream[v1.WatchHoldResponse]) error {
	id, t, err := s.lockTarget(ctx, req.Msg.LockId)
	if err != nil {
		return err
	}
	who, _ := s.caller(ctx) // lockTarget has authenticated the call
	if err := s.lim.renew(who); err != nil {
		return err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.stopping, func() { cancel(context.Cause(s.stopping)) })()
	end, err := t.Engine.AwaitEnd(wctx, id.Handle, req.Msg.FencingToken)
	if err != nil {
		if errors.Is(err, errShuttingDown) {
			return errShuttingDown
		}
		return onShard(t.Shard, err)
	}
	_, reason, msg := classify(end.Err)
	out := &v1.WatchHoldResponse{Reason: reason, Message: msg}
	if end.Audit != nil {
		out.AuditId = end.Audit.ID
	}
	return stream.Send(out)
}
