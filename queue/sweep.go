package queue

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The record sweep.
//
// A delay or holder record (delay.go, loss.go) whose key went without a
// clean end waits for the next acquire of its name to see it and stamp it,
// and a stamped one goes with its lease once its wait is over. A name that
// is never acquired again would keep an unstamped record forever; so each
// engine pages through the records of its Config.Prefix and of every
// space it served lately (Space) every sweepEvery, a page of
// sweepPage records per sweepPause, and stamps the ones whose key is gone
// (their first sighting) and deletes those whose wait is over. Every write
// compares the record's mod revision, so a sweep never undoes what an
// acquire or another gateway's sweep did meanwhile.
const (
	sweepEvery = 10 * time.Minute
	sweepPage  = 200
	sweepPause = time.Second
)

// sweepRecords runs the sweep, over every space served, until the engine
// closes.
func (e *Engine) sweepRecords(ctx context.Context) {
	defer e.wg.Done()
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.sweepAll(ctx, sweepPause)
	}
}

// sweepAll is one pass over the records of every space served.
func (e *Engine) sweepAll(ctx context.Context, pause time.Duration) {
	for _, p := range e.servedSpaces() {
		e.in(p).sweepOnce(ctx, pause)
	}
}

// sweepOnce is one pass over the records of e's space, pausing pause
// between pages.
func (e *Engine) sweepOnce(ctx context.Context, pause time.Duration) {
	root := e.keys.delays()
	from, end := root, clientv3.GetPrefixRangeEnd(root)
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
		resp, err := e.cli.Get(rctx, from, clientv3.WithRange(end), clientv3.WithLimit(sweepPage))
		if err == nil {
			e.sweepPage(rctx, resp.Kvs)
		}
		cancel()
		if err != nil || !resp.More || len(resp.Kvs) == 0 {
			return
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}

// sweepPage stamps or deletes, among kvs, the records whose key is gone.
func (e *Engine) sweepPage(ctx context.Context, kvs []*mvccpb.KeyValue) {
	delays, locks := e.keys.delays(), e.keys.locks()
	const batch = 100 // below etcd's limit of operations per transaction
	for i := 0; i < len(kvs); i += batch {
		part := kvs[i:min(i+batch, len(kvs))]
		gets := make([]clientv3.Op, len(part))
		for j, kv := range part {
			// <delays>/<segment>/<waiter id>[.h] is the record of
			// <locks>/<segment>/<waiter id>.
			gets[j] = clientv3.OpGet(locks+strings.TrimSuffix(strings.TrimPrefix(string(kv.Key), delays), ".h"), clientv3.WithKeysOnly())
		}
		resp, err := e.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return
		}
		now := e.cfg.Clock.Now()
		for j, kv := range part {
			rec, ok := parseDelay(kv)
			if key := firstKV(resp.Responses[j]); ok && key != nil && key.CreateRevision == rec.rev {
				continue // its key lives
			}
			switch {
			case !ok || !rec.expired.IsZero() && !rec.endFor(e).After(now):
				_, _ = e.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
					Then(clientv3.OpDelete(string(kv.Key))).Commit()
			case rec.expired.IsZero():
				rec.d = e.lossWait(rec.d, rec.ttl)
				_, _, _ = e.stampDelay(ctx, rec, now)
			}
		}
	}
}
