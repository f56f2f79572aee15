package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	leasegatev1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// Lock-delay (Chubby, Consul).
//
// A holder that asked for a lock-delay d and whose lease expires — not a
// clean release — keeps the name from being granted to anyone until
// expiry + d: a holder cut off from its gateway gets time to notice before
// the next one starts. etcd's watch cannot tell a release from an expiry
// (both are a DELETE), and a gateway that sees the expiry may crash before
// it tells anyone, so the fact is in etcd before it is needed:
//
//  1. At the grant, before it is answered, the holder writes a delay
//     record <prefix>/delays/<escaped name>/<waiter id> = "<create
//     revision> <d in ms>", with no lease, in a transaction comparing its
//     key's create and mod revision. A gateway that dies before the write
//     never answered the grant: that holder never acted.
//  2. A clean release deletes the record in the release transaction (a
//     nested transaction comparing the record's create-revision prefix),
//     so it frees at once.
//  3. A waiter about to be granted looks for records whose holder key is
//     gone: each is an expiry. It waits d from the moment it saw the
//     record with its key gone, on the engine's clock. That moment is
//     after the expiry, whichever gateway sees it and however late, so
//     the grant comes after expiry + d: conservative across gateways and
//     restarts. Then it deletes the records it waited out, comparing their
//     mod revision, and looks again. A waiter that gives up during the
//     delay leaves the records, and the next waits a whole delay again.
//
// Looking costs a read, paid only where a record may exist: an enqueue
// counts the name's records in its own transaction, and a hub notes
// records present when it reads its view and every deletion of a key
// whose value asked for a delay.

// MaxLockDelay is the longest lock-delay an acquire may ask for.
const MaxLockDelay = leasegatev1.MaxLockDelayMs * time.Millisecond

func validateLockDelay(d time.Duration) error {
	if d < 0 || d > MaxLockDelay {
		return fmt.Errorf("%w: lock delay %s is outside 0 to %s", ErrInvalidArgument, d, MaxLockDelay)
	}
	return nil
}

func (k keys) delayPrefix(name string) string { return k.prefix + "/delays/" + escapeName(name) + "/" }

func (k keys) delay(name, waiterID string) string { return k.delayPrefix(name) + waiterID }

// delayValue is a delay record's value for the holder key created at rev.
func delayValue(rev int64, d time.Duration) string {
	return strconv.FormatInt(rev, 10) + " " + strconv.FormatInt(d.Milliseconds(), 10)
}

// parseDelay reads a delay record: its holder's create revision and delay.
func parseDelay(v []byte) (rev int64, d time.Duration, ok bool) {
	a, b, found := strings.Cut(string(v), " ")
	r, err1 := strconv.ParseInt(a, 10, 64)
	ms, err2 := strconv.ParseInt(b, 10, 64)
	if !found || err1 != nil || err2 != nil || ms < 0 {
		return 0, 0, false
	}
	return r, time.Duration(ms) * time.Millisecond, true
}

// releaseDelayOp deletes h's delay record, if it is h's, in a release.
func (e *Engine) releaseDelayOp(h Handle) clientv3.Op {
	dkey := e.keys.delay(h.Name, h.WaiterID)
	own := strconv.FormatInt(h.Revision, 10) + " "
	return clientv3.OpTxn([]clientv3.Cmp{
		clientv3.Compare(clientv3.Value(dkey), ">", own),
		clientv3.Compare(clientv3.Value(dkey), "<", own+"\xff"),
	}, []clientv3.Op{clientv3.OpDelete(dkey)}, nil)
}

// delayDue reports whether a holder key with a value asking for a
// lock-delay left: a hub's cue to make its next grants look.
func delayDue(v []byte) bool {
	_, m, err := decodeValue(v)
	return err == nil && m.Delay > 0
}

// pendingDelays reads name's delay records whose holder key is gone, as
// of now, and the longest of their delays.
func (e *Engine) pendingDelays(ctx context.Context, name string) ([]*mvccpb.KeyValue, time.Duration, error) {
	resp, err := e.cli.Txn(ctx).Then(
		clientv3.OpGet(e.keys.delayPrefix(name), clientv3.WithPrefix()),
		clientv3.OpGet(e.keys.namePrefix(name), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("queue: read lock-delays: %w", err)
	}
	recs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(recs) == 0 {
		return nil, 0, nil
	}
	live := map[int64]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		live[kv.CreateRevision] = true
	}
	var out []*mvccpb.KeyValue
	var longest time.Duration
	for _, kv := range recs {
		rev, d, ok := parseDelay(kv.Value)
		if ok && live[rev] {
			continue // its holder lives: nothing has expired
		}
		out = append(out, kv)
		longest = max(longest, d)
	}
	return out, longest, nil
}

// awaitLockDelays waits out name's pending lock-delays (step 3 above),
// measured from when this waiter saw each expiry, and deletes the records
// it waited out. With wait unset it only reports whether any is pending.
func (e *Engine) awaitLockDelays(ctx context.Context, name string, wait bool) (pending bool, err error) {
	for {
		recs, d, err := e.pendingDelays(ctx, name)
		if err != nil || len(recs) == 0 {
			return false, err
		}
		if !wait {
			return true, nil
		}
		e.at(ctx, pointDelay)
		t := e.cfg.Clock.NewTimer(d)
		if e.hooks != nil {
			e.hooks.park(ctx, parked{until: e.cfg.Clock.Now().Add(d), now: e.cfg.Clock.Now})
		}
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
		if e.hooks != nil {
			e.hooks.unpark(ctx)
		}
		if ctx.Err() != nil {
			return true, context.Cause(ctx)
		}
		for _, kv := range recs {
			// Only the record seen: one written again since is another's.
			_, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
				Then(clientv3.OpDelete(string(kv.Key))).Commit()
			if err != nil {
				return true, fmt.Errorf("queue: clear a lock-delay: %w", err)
			}
		}
	}
}

// delayPending reports whether q, which holds, must not be granted now
// for a pending lock-delay: TryAcquire's look, which never waits. An
// answer it cannot get counts as pending.
func (e *Engine) delayPending(ctx context.Context, q *enqueued) bool {
	if !q.delays {
		return false
	}
	pending, err := e.awaitLockDelays(ctx, q.h.Name, false)
	return pending || err != nil
}

// recordLockDelay writes a delay record for a grant (step 1 above).
func (e *Engine) recordLockDelay(ctx context.Context, r *AcquireRequest, q *enqueued) error {
	key := e.keys.waiter(q.h.Name, q.h.WaiterID)
	resp, err := e.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", q.h.Revision),
		clientv3.Compare(clientv3.ModRevision(key), "=", q.modRev),
	).Then(clientv3.OpPut(e.keys.delay(q.h.Name, q.h.WaiterID), delayValue(q.h.Revision, r.LockDelay))).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return fmt.Errorf("queue: record the lock-delay: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	if kv := firstKV(resp.Responses[0]); kv != nil && kv.CreateRevision == q.h.Revision {
		return fmt.Errorf("%w: a retry with the same request id took the waiter over", ErrSuperseded)
	}
	return fmt.Errorf("%w: the waiter's key is gone (its lease expired or was revoked)", ErrLeaseLost)
}
