package client

import (
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// watchHold keeps a watch of l on a gateway (LockService.WatchHold) from
// DefaultHoldWatchAfter (WithHoldWatch) after the grant until l is done,
// and ends l the moment a gateway says how it ended: evicted (ErrEvicted),
// or lost. A watch that fails (its gateway stopped, a link broke) is opened
// again on the next gateway after a backoff that grows while the watches
// fail and starts again after one that delivered; the renewals go on
// beside it and still decide the lock's deadline. A watch a gateway will
// not serve — refused at the tenant's cap on open streams (QUOTA_EXCEEDED)
// or unknown to it (unimplemented) — is not asked for again: the lock is
// held as well without it. lose ends l with the error it is given.
func (c *Client) watchHold(l *Lock, lose func(error)) {
	after := c.cfg.holdWatch
	if after < 0 {
		return
	}
	go func() {
		ctx := l.ctx
		// On the real clock: the watch's start is no deadline, and a fake
		// clock's timers are its tests' to count.
		t := time.NewTimer(after)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		bo := c.newBackoff()
		for ctx.Err() == nil {
			i, ep := c.pick()
			stream, err := ep.rpc.WatchHold(ctx, connect.NewRequest(&v1.WatchHoldRequest{LockId: l.id, FencingToken: l.token}))
			if err == nil {
				for stream.Receive() {
					bo.reset()
					if m := stream.Msg(); m.Reason != v1.ErrorReason_ERROR_REASON_UNSPECIFIED {
						_ = stream.Close()
						lose(l.lostError(holdEnded(m)))
						return
					}
				}
				err = stream.Err()
				_ = stream.Close()
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil && proofRefused(err) {
				// The gateway proved the lock gone or not the caller's.
				lose(l.lostError(err))
				return
			}
			if err != nil && watchNotServed(err) {
				return
			}
			c.failed(i)
			t := time.NewTimer(bo.next())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
}

// watchNotServed reports a WatchHold answer that asking again would not
// change soon: the tenant's streams are at their cap, or the gateway does
// not know the call.
func watchNotServed(err error) bool {
	return connect.CodeOf(err) == connect.CodeUnimplemented || Reason(err) == ReasonQuotaExceeded
}

// holdEnded is the gateway's account of how a held lock ended, as the
// error a renewal would have answered.
func holdEnded(m *v1.WatchHoldResponse) error {
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New(m.Message))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: m.Reason.String(), Domain: v1.ErrorDomain}); err == nil {
		ce.AddDetail(d)
	}
	if m.AuditId != "" && m.Message == "" {
		return fmt.Errorf("%w (audit record %s)", ce, m.AuditId)
	}
	return ce
}
