package gateway

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

// holdBeat is how often a WatchHold stream says the lock is still held (a
// message without a reason, bounded by the send timeout), so a client that
// stopped reading is dropped and no proxy closes the idle connection.
const holdBeat = 30 * time.Second

// WatchHold tells a holder how its lock ended — an eviction or a loss,
// whichever gateway saw it — as soon as this gateway's engine learns of it
// (locks.Held.AwaitEnd). Only a caller with the lock's id can open it; it
// costs a stream and no etcd work, is charged to the renewal rates, counts
// as an open stream (MaxWaitersPerTenant), and ends with SHUTTING_DOWN when
// the gateway shuts down, for the SDK to watch on through another.
func (s *Service) WatchHold(ctx context.Context, req *connect.Request[v1.WatchHoldRequest], stream *connect.ServerStream[v1.WatchHoldResponse]) error {
	_, h, err := s.held(ctx, req.Msg.LockId, nil)
	if err != nil {
		return err
	}
	who, _ := s.caller(ctx) // held has authenticated the call
	// An open watch costs like an open wait (a stream, its goroutines and an
	// engine subscription while the lock is held): it counts against that cap.
	endWait, err := s.lim.startWait(who)
	if err != nil {
		return err
	}
	defer endWait()
	// The beats count from the opening: armed before the headers go.
	beat := s.clk.NewTimer(holdBeat)
	defer func() { beat.Stop() }()
	// The response headers go at once: the client knows the watch is open.
	if err := s.send(ctx, func() error { return stream.Send(nil) }); err != nil {
		return err
	}

	// The handler's goroutine is the stream's only writer — a stream takes
	// one message at a time, and none once its handler has returned. The
	// engine's wait runs beside it and only hands over its answer; it has
	// ended before the handler returns, whichever way the stream ends.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer s.onStop(cancel)()
	type awaited struct {
		end queue.End
		err error
	}
	ended := make(chan awaited, 1)
	go func() {
		end, err := h.AwaitEnd(wctx, req.Msg.FencingToken)
		ended <- awaited{end, err}
	}()
	var a awaited
	for waiting := true; waiting; {
		select {
		case a = <-ended:
			waiting = false
		case <-beat.C():
			if err := s.send(ctx, func() error { return stream.Send(&v1.WatchHoldResponse{}) }); err != nil {
				cancel(err) // the client is gone
				<-ended
				return err
			}
			beat = s.clk.NewTimer(holdBeat)
		}
	}
	if a.err != nil {
		if errors.Is(a.err, errShuttingDown) {
			return errShuttingDown
		}
		return onShard(h.Shard(), a.err)
	}
	_, reason, msg := classify(a.end.Err)
	out := &v1.WatchHoldResponse{Reason: reason, Message: msg}
	if a.end.Audit != nil {
		out.AuditId = a.end.Audit.ID
	}
	return s.send(ctx, func() error { return stream.Send(out) })
}
