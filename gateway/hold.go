package gateway

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// holdBeat is how often a WatchHold stream says the lock is still held: a
// message without a reason, each bounded by the send timeout, so that a
// client that stopped reading is dropped and an idle connection is not
// closed by a proxy in between.
const holdBeat = 30 * time.Second

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
	// The response headers go at once: the client knows the watch is open.
	if err := s.send(ctx, func() error { return stream.Send(nil) }); err != nil {
		return err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.stopping, func() { cancel(context.Cause(s.stopping)) })()
	beat := time.NewTicker(holdBeat)
	defer beat.Stop()
	go func() {
		for {
			select {
			case <-wctx.Done():
				return
			case <-beat.C:
				if err := s.send(ctx, func() error { return stream.Send(&v1.WatchHoldResponse{}) }); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
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
	cancel(nil) // the beats stop before the last message
	return s.send(ctx, func() error { return stream.Send(out) })
}
