package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watching queues.
//
// WatchLocks keeps the queues of the names it follows, read at one
// revision, and applies etcd's events to them one revision at a time, so
// every event it reports is derived from an exact before and after:
//
//   - a key created first in its queue is HELD, behind others QUEUED;
//   - a deleted key that was first is RELEASED when the release mark
//     (handoff.go) names it at the same revision, FORCE_RELEASED when an
//     audit record written at that revision names it, and otherwise
//     EXPIRED: that last one is inferred from the absence of a mark (a
//     lapsed or revoked lease, a closed session, a grant the gateway gave
//     up because it could not deliver it);
//   - a deleted key that was not first LEFT;
//   - the key first after a revision's deletes, if it was not first
//     before, is HELD.
//
// One range watch covers the audit records, the release mark and the lock
// keys (they are adjacent in key order), so the mark or the record of a
// delete arrives in the same response as the delete: etcd never splits
// one revision's events across watch responses.

// EventType is what happened to a key of a queue.
type EventType int

// Event types.
const (
	EventHeld EventType = iota + 1
	EventQueued
	EventReleased
	EventExpired
	EventForceReleased
	EventLeft
)

var eventNames = [...]string{"", "held", "queued", "released", "expired", "force_released", "left"}

// String returns the event type's lower-case name.
func (t EventType) String() string {
	if t > 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// WatchEvent is one change of one queue, or one snapshot entry.
type WatchEvent struct {
	// Type is what happened.
	Type EventType
	// Name is the lock name.
	Name string
	// Entry is the key: Position is its place at the event (for a key
	// that went, the place it had).
	Entry QueueEntry
	// Revision is the etcd revision of the change (of the snapshot).
	Revision int64
}

// WatchBatch is what WatchLocks reports at once.
type WatchBatch struct {
	// Snapshot is true for a part of the starting snapshot: Events hold
	// the current holders (EventHeld) and waiters (EventQueued).
	Snapshot bool
	// SnapshotDone is true for the snapshot's last part.
	SnapshotDone bool
	// Events are snapshot entries or changes, in revision order.
	Events []WatchEvent
	// Revision is the revision the watcher's view has reached: every
	// change up to it has been reported (when SnapshotDone or not a
	// snapshot). A batch with no events is a progress report.
	Revision int64
}

// snapshotChunk is the most events in one snapshot batch.
const snapshotChunk = 500

// WatchLocks follows the queues of every name that begins with prefix.
// With from == 0 it first reports a snapshot of them at the current
// revision; with from > 0 it reads their state at revision from (which
// must not be compacted: ErrCompacted) and reports the changes after it.
// It calls emit on its own goroutine, one batch at a time, and returns
// when ctx ends, emit fails (with emit's error), or the watch fails:
// ErrCompacted when etcd compacted history the watch still needed (the
// caller starts over with from == 0), another error for a watch that
// broke (resume from the last batch's Revision).
func (e *Engine) WatchLocks(ctx context.Context, prefix string, from int64, emit func(WatchBatch) error) error {
	defer e.enter()()
	if from < 0 {
		return fmt.Errorf("%w: watch revision %d is negative", ErrInvalidArgument, from)
	}
	w := &queueWatch{
		base:   LocksPrefix(e.cfg.Prefix),
		seg:    escapeName(prefix),
		mark:   e.cfg.Prefix + releaseMarkKey,
		audit:  e.keys.auditPrefix(),
		queues: map[string]*watchQueue{},
	}
	rev, err := w.load(ctx, e.cli, from)
	if err != nil {
		return err
	}
	if from == 0 {
		if err := w.snapshot(rev, emit); err != nil {
			return err
		}
	}
	end := clientv3.GetPrefixRangeEnd(w.base + w.seg)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := e.cli.Watch(wctx, w.audit, clientv3.WithRange(end), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok = <-wch:
		}
		if !ok {
			if err := ctx.Err(); err != nil {
				return err
			}
			return errors.New("queue: watch closed")
		}
		if wr.CompactRevision != 0 {
			return fmt.Errorf("%w: history before revision %d is gone", ErrCompacted, wr.CompactRevision)
		}
		if err := wr.Err(); err != nil {
			return fmt.Errorf("queue: watch: %w", err)
		}
		if wr.IsProgressNotify() {
			if wr.Header.Revision > rev {
				rev = wr.Header.Revision
				if err := emit(WatchBatch{Revision: rev}); err != nil {
					return err
				}
			}
			continue
		}
		var out []WatchEvent
		for i := 0; i < len(wr.Events); {
			j := i
			r := wr.Events[i].Kv.ModRevision
			for j < len(wr.Events) && wr.Events[j].Kv.ModRevision == r {
				j++
			}
			out = append(out, w.apply(r, wr.Events[i:j])...)
			rev = r
			i = j
		}
		if err := emit(WatchBatch{Events: out, Revision: rev}); err != nil {
			return err
		}
	}
}

// queueWatch is the state WatchLocks keeps.
type queueWatch struct {
	base, seg, mark, audit string
	queues                 map[string]*watchQueue // by escaped segment
}

type watchQueue struct {
	name    string
	entries []QueueEntry // FIFO
}

// load reads every followed queue at revision from (0: now) and returns
// the revision read.
func (w *queueWatch) load(ctx context.Context, cli *clientv3.Client, from int64) (int64, error) {
	start, end := w.base+w.seg, clientv3.GetPrefixRangeEnd(w.base+w.seg)
	rev := from
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, start, opts...)
		switch {
		case errors.Is(err, rpctypes.ErrCompacted):
			return 0, fmt.Errorf("%w: revision %d", ErrCompacted, from)
		case errors.Is(err, rpctypes.ErrFutureRev):
			return 0, fmt.Errorf("%w: revision %d is in the shard's future", ErrInvalidArgument, from)
		case err != nil:
			return 0, fmt.Errorf("queue: watch: read queues: %w", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			w.put(kv)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	for _, q := range w.queues {
		sort.Slice(q.entries, func(i, j int) bool { return q.entries[i].Revision < q.entries[j].Revision })
		renumber(q.entries)
	}
	return rev, nil
}

// snapshot emits the loaded state as snapshot batches.
func (w *queueWatch) snapshot(rev int64, emit func(WatchBatch) error) error {
	segs := make([]string, 0, len(w.queues))
	for s := range w.queues {
		segs = append(segs, s)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i]+"/" < segs[j]+"/" })
	b := WatchBatch{Snapshot: true, Revision: rev}
	for _, s := range segs {
		q := w.queues[s]
		for _, en := range q.entries {
			t := EventQueued
			if en.Position == 0 {
				t = EventHeld
			}
			b.Events = append(b.Events, WatchEvent{Type: t, Name: q.name, Entry: en, Revision: rev})
			if len(b.Events) == snapshotChunk {
				if err := emit(b); err != nil {
					return err
				}
				b.Events = nil
			}
		}
	}
	b.SnapshotDone = true
	return emit(b)
}

// put adds or updates a lock key; it reports whether the key is new.
func (w *queueWatch) put(kv *mvccpb.KeyValue) (created bool) {
	seg, ok := w.segOf(string(kv.Key))
	if !ok {
		return false
	}
	en, err := entryOf(kv)
	if err != nil {
		return false
	}
	q := w.queues[seg]
	if q == nil {
		name, err := unescapeName(seg)
		if err != nil {
			return false
		}
		q = &watchQueue{name: name}
		w.queues[seg] = q
	}
	for i := range q.entries {
		if q.entries[i].waiter == en.waiter {
			en.Position = q.entries[i].Position
			q.entries[i] = en // a takeover rewrote the value
			return false
		}
	}
	q.entries = append(q.entries, en) // the newest create revision: last
	en.Position = int64(len(q.entries) - 1)
	q.entries[len(q.entries)-1] = en
	return true
}

// segOf returns a followed lock key's name segment.
func (w *queueWatch) segOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, w.base)
	if !ok {
		return "", false
	}
	seg, _, ok := strings.Cut(rest, "/")
	if !ok || !strings.HasPrefix(seg, w.seg) {
		return "", false
	}
	return seg, true
}

func renumber(es []QueueEntry) {
	for i := range es {
		es[i].Position = int64(i)
	}
}

// apply applies the events of revision rev and returns what they mean.
func (w *queueWatch) apply(rev int64, evs []*clientv3.Event) []WatchEvent {
	released, forced := map[string]bool{}, map[string]bool{}
	type change struct {
		seg     string
		before  []QueueEntry
		gone    []QueueEntry
		created []string // waiter ids
	}
	var order []string
	changes := map[string]*change{}
	touch := func(seg string) *change {
		c := changes[seg]
		if c == nil {
			c = &change{seg: seg}
			if q := w.queues[seg]; q != nil {
				c.before = append([]QueueEntry(nil), q.entries...)
			}
			changes[seg] = c
			order = append(order, seg)
		}
		return c
	}
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		switch {
		case key == w.mark:
			if ev.Type == clientv3.EventTypePut {
				released[string(ev.Kv.Value)] = true
			}
		case strings.HasPrefix(key, w.audit):
			var rec AuditRecord
			if ev.Type == clientv3.EventTypePut && json.Unmarshal(ev.Kv.Value, &rec) == nil && rec.Key != "" {
				forced[rec.Key] = true
			}
		default:
			seg, ok := w.segOf(key)
			if !ok {
				continue
			}
			c := touch(seg)
			if ev.Type == clientv3.EventTypePut {
				if w.put(ev.Kv) {
					c.created = append(c.created, key[strings.LastIndexByte(key, '/')+1:])
				}
				continue
			}
			q := w.queues[seg]
			if q == nil {
				continue
			}
			wid := key[strings.LastIndexByte(key, '/')+1:]
			for i, en := range q.entries {
				if en.waiter == wid {
					c.gone = append(c.gone, en)
					q.entries = append(q.entries[:i], q.entries[i+1:]...)
					break
				}
			}
		}
	}
	var out []WatchEvent
	for _, seg := range order {
		c := changes[seg]
		q := w.queues[seg]
		if q == nil {
			continue // a delete of a key the watch never saw
		}
		renumber(q.entries)
		name := q.name
		var oldHead int64
		if len(c.before) > 0 {
			oldHead = c.before[0].Revision
		}
		sort.Slice(c.gone, func(i, j int) bool { return c.gone[i].Position < c.gone[j].Position })
		for _, en := range c.gone {
			t := EventLeft
			if en.Revision == oldHead {
				rel := seg + "/" + en.waiter
				switch {
				case released[rel]:
					t = EventReleased
				case forced[rel]:
					t = EventForceReleased
				default:
					t = EventExpired
				}
			}
			out = append(out, WatchEvent{Type: t, Name: name, Entry: en, Revision: rev})
		}
		if len(q.entries) > 0 && q.entries[0].Revision != oldHead {
			out = append(out, WatchEvent{Type: EventHeld, Name: name, Entry: q.entries[0], Revision: rev})
		}
		for _, wid := range c.created {
			for _, en := range q.entries[min(1, len(q.entries)):] {
				if en.waiter == wid {
					out = append(out, WatchEvent{Type: EventQueued, Name: name, Entry: en, Revision: rev})
				}
			}
		}
		if len(q.entries) == 0 {
			delete(w.queues, seg)
		}
	}
	return out
}
