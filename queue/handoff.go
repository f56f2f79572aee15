package queue

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
)

// Handoff records.
//
// A waiter's grant span is linked to the span of the release that handed it
// the lock, whichever gateways the two ran on. A delete carries no value, so
// a traced release also writes, in the same transaction as its delete, a
// small record at <prefix>/handoff/<escaped name>: the release span's trace
// and span ids, the release time and the released key's waiter id (never a
// secret). The record is attached to an engine-wide lease of handoffTTL,
// granted in the background and replaced every handoffRotate, so records
// vanish on their own without a revocation each.
//
// A traced waiter reads the record when its name's hub (hub.go) finds it
// first, and links its grant span to the release only when the record
// names the very key whose deletion made it first and was written after
// the waiter enqueued. Untraced releases write nothing: with tracing off,
// the release transaction is exactly the compare-and-delete.
const (
	handoffTTL    = 60 * time.Second
	handoffRotate = 15 * time.Second
)

// handoffRecord is a decoded record.
type handoffRecord struct {
	span trace.SpanContext
	at   time.Time
}

type handoffValue struct {
	Trace  string `json:"t"`
	Span   string `json:"s"`
	Flags  byte   `json:"f"`
	At     int64  `json:"at"` // Unix nanoseconds
	Waiter string `json:"w"`
}

func (k keys) handoff(name string) string { return k.prefix + handoffSeg + escapeName(name) }

// handoffLease is the engine's current record lease.
type handoffLease struct {
	mu       sync.Mutex
	id       clientv3.LeaseID
	at       time.Time // when the grant was sent
	granting bool
}

// handoffLeaseID returns a lease with at least handoffTTL/2 left, or 0 when
// none can be had. Once the current lease is handoffRotate old it starts a
// replacement in the background; when there is no usable lease at all (the
// first traced release, or after a long quiet spell) it grants one inline.
func (e *Engine) handoffLeaseID(ctx context.Context) clientv3.LeaseID {
	l := &e.tel.ho
	l.mu.Lock()
	age := e.cfg.Clock.Now().Sub(l.at)
	if l.id == 0 || age >= handoffTTL/2 {
		l.mu.Unlock()
		sent := e.cfg.Clock.Now()
		resp, err := e.cli.Grant(ctx, int64(handoffTTL/time.Second))
		if err != nil {
			return 0
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.id == 0 || sent.After(l.at) {
			l.id, l.at = resp.ID, sent
		}
		return resp.ID
	}
	defer l.mu.Unlock()
	if age >= handoffRotate && !l.granting && e.ctx.Err() == nil {
		l.granting = true
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			ctx, cancel := e.opCtx()
			defer cancel()
			sent := e.cfg.Clock.Now()
			resp, err := e.cli.Grant(ctx, int64(handoffTTL/time.Second))
			l.mu.Lock()
			defer l.mu.Unlock()
			l.granting = false
			if err == nil {
				l.id, l.at = resp.ID, sent
			}
		}()
	}
	return l.id
}

// Release marks.
//
// An etcd delete looks the same whether a release or a lease expiry caused
// it. So that a watcher can tell them apart exactly, the release
// transaction also overwrites one key per key space, <prefix>/locks-released,
// with the released key (relative to the locks prefix): a delete of a key
// at the revision where the mark names it is a release. The mark is an unconditional put beside the delete in the same
// transaction: no round trip, no compare, and so no change to when the
// release succeeds; it is one small key per prefix, overwritten, never a
// key per name. It sorts just before <prefix>/locks/ ('-' < '/'), so one
// range watch sees the marks, the audit records and the lock keys in
// revision order.
const releaseMarkKey = "/locks-released"

// endMark is the mark of a clean end of key: the key after kind, "" for a
// release; a watcher does not take another kind (loss.go) for a release.
func (e *Engine) endMark(kind, key string) clientv3.Op {
	return clientv3.OpPut(e.keys.mark(), kind+e.keys.rel(key))
}

// releaseCommit runs the release transaction of h's key under cmps: the
// delete, the ops in also (a re-entered lock's holds record) and, when
// ctx's span is sampled, the handoff record. A record lease that vanished
// (it should not) never fails the release: the transaction is retried
// without the record. Its Else reads the key and its holds record, for
// Release to judge.
func (e *Engine) releaseCommit(ctx context.Context, h Handle, key string, cmps []clientv3.Cmp, also ...clientv3.Op) (*clientv3.TxnResponse, error) {
	// The lock-delay record goes with a clean release (delay.go), and the
	// release marker tells a watcher this delete was a release (watch.go).
	ops := append([]clientv3.Op{clientv3.OpDelete(key, clientv3.WithPrevKV())}, e.releaseDelayOps(h)...)
	ops = append(append(ops, e.endMark("", key)), also...)
	base := len(ops)
	var lease clientv3.LeaseID
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() && e.tel.tracer != nil {
		if lease = e.handoffLeaseID(ctx); lease != 0 {
			v, _ := json.Marshal(handoffValue{
				Trace: sc.TraceID().String(), Span: sc.SpanID().String(), Flags: byte(sc.TraceFlags()),
				At: e.cfg.Clock.Now().UnixNano(), Waiter: h.WaiterID,
			})
			ops = append(ops, clientv3.OpPut(e.keys.handoff(h.Name), string(v), clientv3.WithLease(lease)))
		}
	}
	els := []clientv3.Op{clientv3.OpGet(key), clientv3.OpGet(e.keys.holds(h.Name, h.WaiterID, h.Revision))}
	resp, err := e.cli.Txn(ctx).If(cmps...).Then(ops...).Else(els...).Commit()
	if lease != 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
		e.tel.ho.mu.Lock()
		if e.tel.ho.id == lease {
			e.tel.ho.id = 0
		}
		e.tel.ho.mu.Unlock()
		resp, err = e.cli.Txn(ctx).If(cmps...).Then(ops[:base]...).Else(els...).Commit()
	}
	return resp, err
}

// handoffOf reads name's handoff record for a waiter granted after the
// key left (the last key ahead of it to go) was deleted, and returns it
// when it describes that release, after the waiter's own enqueue at myRev.
// It reads only when the wait is traced (its span is sampled): an
// untraced grant reads nothing.
func (e *Engine) handoffOf(ctx context.Context, name, left string, myRev int64) *handoffRecord {
	if e.tel.tracer == nil || left == "" || !trace.SpanContextFromContext(ctx).IsSampled() {
		return nil
	}
	resp, err := e.cli.Txn(ctx).Then(clientv3.OpGet(e.keys.handoff(name))).Commit()
	if err != nil || len(resp.Responses) == 0 {
		return nil
	}
	kv := firstKV(resp.Responses[0])
	if kv == nil || kv.ModRevision <= myRev {
		return nil
	}
	var v handoffValue
	if json.Unmarshal(kv.Value, &v) != nil || !strings.HasSuffix(left, "/"+v.Waiter) || v.Waiter == "" {
		return nil
	}
	tid, err1 := trace.TraceIDFromHex(v.Trace)
	sid, err2 := trace.SpanIDFromHex(v.Span)
	if err1 != nil || err2 != nil {
		return nil
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(v.Flags), Remote: true})
	return &handoffRecord{span: sc, at: time.Unix(0, v.At)}
}
