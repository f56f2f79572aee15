package queue

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watching queues.
//
// A view (viewState) keeps the queues of the names a prefix covers, read
// at one revision, and applies etcd's events one revision at a time, so
// every event it reports is derived from an exact before and after,
// holders judged by the grant rule (limit.go, holders) on both:
//
//   - a key that holds after a revision and did not before is HELD;
//   - a key created that does not hold is QUEUED;
//   - a deleted key that held is RELEASED when the release mark
//     (handoff.go) names it at the same revision, FORCE_RELEASED when an
//     audit record written at that revision names it, and otherwise
//     EXPIRED, inferred from the absence of a mark (a lapsed or revoked
//     lease, a closed session, a grant given up undelivered);
//   - a deleted key that did not hold LEFT.
//
// One range watch covers the audit records, the release mark and the lock
// keys (adjacent in key order), so the mark or record of a delete arrives
// in the same response as the delete: etcd never splits one revision's
// events across watch responses. Views are shared by every watcher of the
// same prefix on an engine (watchview.go).

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
	// Name is the lock's name, or the election's.
	Name string
	// Election is true for an event of an election's queue.
	Election bool
	// Entry is the key: Position is its place at the event (for a key
	// that went, the place it had), numbered as the Acquire stream
	// numbers it: 0 for a holder.
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

// watchKey is one key of a view: what the events about it carry, and
// nothing else (no secret, no lease, no TTL).
type watchKey struct {
	create   int64
	enqueued int64 // Unix milliseconds
	client   string
	waiter   [16]byte // the key's last segment (waiterTag)
	limit    int32    // limitOf its value: 0 when the engine cannot read it
	epoch    uint16
	session  bool
}

// waiterTag is a key's last segment in 16 bytes: a WaiterID decoded, or a
// digest of a segment that is not one (foreign data under the prefix).
func waiterTag(seg string) [16]byte {
	var t [16]byte
	if len(seg) == 32 {
		if n, err := hex.Decode(t[:], []byte(seg)); err == nil && n == 16 {
			return t
		}
	}
	h := sha256.Sum256([]byte(seg))
	copy(t[:], h[:])
	return t
}

func watchKeyOf(kv *mvccpb.KeyValue, waiter string) watchKey {
	k := watchKey{create: kv.CreateRevision, waiter: waiterTag(waiter)}
	if m, err := decodeValue(kv.Value); err == nil {
		k.enqueued, k.client, k.epoch, k.session = m.Enqueued, m.ClientID, m.Epoch, m.Session
		k.limit = int32(min(max(m.Limit, 1), MaxLimit+1))
	}
	return k
}

// heldOf is how many of a queue's keys hold (holders).
func heldOf(ks []watchKey) int { return holders(len(ks), func(i int) int { return int(ks[i].limit) }) }

// entry is key i of a queue whose first held keys hold, as an observer
// sees it.
func (k watchKey) entry(i, held int) QueueEntry {
	q := QueueEntry{
		ClientID: k.client, Enqueued: time.UnixMilli(k.enqueued), Session: k.session,
		Token: Token(k.epoch, k.create), Revision: k.create, limit: int(k.limit), holder: i < held,
	}
	if !q.holder {
		q.Position = position(int64(i), max(int(k.limit), 1))
	}
	return q
}

// viewState is the queues of the names a prefix covers at revision rev.
// Each queue's slice is never changed once stored (a change stores a new
// one), so a snapshot may keep the slices it captured while the view
// moves on.
type viewState struct {
	set               *watchSet // counts the keys the state holds
	base, mark, audit string
	id                viewID                // its space and prefix
	queues            map[string][]watchKey // by escaped segment, in create order
	keys              int64                 // keys in queues
	rev               int64
}

// newState is a state of the view id, of the space ks, with nothing read
// yet.
func (s *watchSet) newState(ks keys, id viewID) *viewState {
	return &viewState{set: s, base: ks.locks(), mark: ks.mark(),
		audit: ks.auditPrefix(), id: id, queues: map[string][]watchKey{}}
}

// drop gives the state's keys back to the budget.
func (st *viewState) drop() {
	st.set.count(st.id.space, -st.keys)
	st.keys, st.queues = 0, nil
}

// load reads every queue the prefix covers at revision from (0: now) and
// sets rev. It counts the keys first and asks the budget for them
// (watchSet.reserve), so a prefix too large is refused before it is read.
func (st *viewState) load(ctx context.Context, cli *clientv3.Client, from int64) error {
	ranges := nameRanges(st.base, st.id.prefix)
	rev, count := from, int64(0)
	for _, r := range ranges {
		opts := []clientv3.OpOption{clientv3.WithRange(r.end), clientv3.WithCountOnly()}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, r.from, opts...)
		if err != nil {
			return loadErr(err, from)
		}
		rev = resp.Header.Revision
		if from != 0 {
			rev = from
		}
		count += resp.Count
	}
	if err := st.set.reserve(st.id, count); err != nil {
		return err
	}
	st.keys = count // reserved: st.keys and the budget move together from here on
	loaded := int64(0)
	for _, r := range ranges {
		start := r.from
		for {
			resp, err := cli.Get(ctx, start, clientv3.WithRange(r.end), clientv3.WithLimit(1000), clientv3.WithRev(rev))
			if err != nil {
				return loadErr(err, from)
			}
			for _, kv := range resp.Kvs {
				if seg, waiter, ok := st.split(string(kv.Key)); ok {
					ks, had := st.queues[seg]
					if !had {
						seg = strings.Clone(seg) // not the whole key's bytes
					}
					st.queues[seg] = append(ks, watchKeyOf(kv, waiter))
					loaded++
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	st.set.count(st.id.space, loaded-count)
	st.keys = loaded
	for _, ks := range st.queues {
		slices.SortFunc(ks, func(a, b watchKey) int { return cmp.Compare(a.create, b.create) })
	}
	st.rev = rev
	return nil
}

func loadErr(err error, from int64) error {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: revision %d", ErrCompacted, from)
	case errors.Is(err, rpctypes.ErrFutureRev):
		// A cluster restored from a backup: its history is not the one
		// the revision came from either.
		return fmt.Errorf("%w: revision %d is in the shard's future (restored from a backup?)", ErrCompacted, from)
	}
	return fmt.Errorf("queue: watch: read queues: %w", err)
}

// split returns a followed lock key's name segment and waiter segment.
func (st *viewState) split(key string) (seg, waiter string, ok bool) {
	rest, ok := strings.CutPrefix(key, st.base)
	if !ok {
		return "", "", false
	}
	seg, waiter, ok = strings.Cut(rest, "/")
	if !ok || !segWithin(seg, st.id.prefix) {
		return "", "", false
	}
	if _, err := unescapeName(seg); err != nil {
		return "", "", false // not a name's segment: foreign data under the prefix
	}
	return seg, waiter, true
}

// segName is the name, and whether it is an election's, of a segment
// split accepted.
func segName(seg string) (string, bool) {
	n, _ := unescapeName(seg)
	return nameOf(n)
}

// watchFrom watches the state's keys (with the audit records and the
// release mark beside them) from rev+1, with progress notices, and passes
// each response to fn until fn fails, ctx ends or the watch does:
// ErrCompacted when etcd compacted history it needed, another error for a
// watch that broke (resume from the last applied revision).
func (st *viewState) watchFrom(ctx context.Context, cli *clientv3.Client, rev int64, fn func(clientv3.WatchResponse) error) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	end := clientv3.GetPrefixRangeEnd(st.base + escapeName(st.id.prefix))
	wch := cli.Watch(wctx, st.audit, clientv3.WithRange(end), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok = <-wch:
		}
		switch {
		case !ok:
			if err := ctx.Err(); err != nil {
				return err
			}
			return errors.New("queue: watch closed")
		case wr.CompactRevision != 0:
			return fmt.Errorf("%w: history before revision %d is gone", ErrCompacted, wr.CompactRevision)
		case wr.Err() != nil:
			return fmt.Errorf("queue: watch: %w", wr.Err())
		}
		if err := fn(wr); err != nil {
			return err
		}
	}
}

// batchOf applies a watch response to the state and returns what it
// means: its events, one revision at a time, or a progress report. It
// reports ErrWatchBudget, and applies nothing more, once the state grew
// past the budget.
func (st *viewState) batchOf(wr clientv3.WatchResponse) (WatchBatch, error) {
	if wr.IsProgressNotify() {
		st.rev = max(st.rev, wr.Header.Revision)
		return WatchBatch{Revision: st.rev}, nil
	}
	var out []WatchEvent
	for i := 0; i < len(wr.Events); {
		j := i
		r := wr.Events[i].Kv.ModRevision
		for j < len(wr.Events) && wr.Events[j].Kv.ModRevision == r {
			j++
		}
		grew, evs := st.apply(r, wr.Events[i:j])
		out = append(out, evs...)
		st.rev = r
		i = j
		if err := st.set.grow(st.id, grew); err != nil {
			return WatchBatch{}, err
		}
	}
	return WatchBatch{Events: out, Revision: st.rev}, nil
}

// qchange is what one revision did to one queue.
type qchange struct {
	before, after []watchKey
	gone          []watchKey
	created       []int64 // create revisions
}

// apply applies the events of revision rev and returns how many keys the
// state gained (negative: lost) and what the events mean.
func (st *viewState) apply(rev int64, evs []*clientv3.Event) (int64, []WatchEvent) {
	released, forced := map[string]bool{}, map[string]bool{}
	var order []string
	changes := map[string]*qchange{}
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		switch {
		case key == st.mark:
			if ev.Type == clientv3.EventTypePut {
				released[string(ev.Kv.Value)] = true
			}
			continue
		case strings.HasPrefix(key, st.audit):
			var rec AuditRecord
			if ev.Type == clientv3.EventTypePut && json.Unmarshal(ev.Kv.Value, &rec) == nil && rec.Key != "" {
				forced[rec.Key] = true
			}
			continue
		}
		seg, waiter, ok := st.split(key)
		if !ok {
			continue
		}
		c := changes[seg]
		if c == nil {
			before := st.queues[seg]
			c = &qchange{before: before, after: slices.Clone(before)}
			changes[seg] = c
			order = append(order, seg)
		}
		tag := waiterTag(waiter)
		i := slices.IndexFunc(c.after, func(k watchKey) bool { return k.waiter == tag })
		switch {
		case ev.Type == clientv3.EventTypeDelete:
			if i >= 0 {
				c.gone = append(c.gone, c.after[i])
				c.after = slices.Delete(c.after, i, i+1)
			}
		case i >= 0:
			c.after[i] = watchKeyOf(ev.Kv, waiter) // a takeover rewrote the value
		default:
			// A new key has the newest create revision: it goes last.
			c.after = append(c.after, watchKeyOf(ev.Kv, waiter))
			c.created = append(c.created, ev.Kv.CreateRevision)
		}
	}
	var grew int64
	var out []WatchEvent
	for _, seg := range order {
		c := changes[seg]
		grew += int64(len(c.after) - len(c.before))
		if len(c.after) == 0 {
			delete(st.queues, seg)
		} else {
			if c.before == nil {
				seg = strings.Clone(seg) // a new name: not the whole key's bytes
			}
			st.queues[seg] = c.after
		}
		name, election := segName(seg)
		out = append(out, c.events(name, election, seg, rev, released, forced)...)
	}
	st.keys += grew
	return grew, out
}

// events are what one revision's change of a queue means.
func (c *qchange) events(name string, election bool, seg string, rev int64, released, forced map[string]bool) []WatchEvent {
	var out []WatchEvent
	ev := func(t EventType, q QueueEntry) {
		out = append(out, WatchEvent{Type: t, Name: name, Election: election, Entry: q, Revision: rev})
	}
	indexIn := func(ks []watchKey, create int64) int {
		return slices.IndexFunc(ks, func(k watchKey) bool { return k.create == create })
	}
	hb, ha := heldOf(c.before), heldOf(c.after)
	slices.SortFunc(c.gone, func(a, b watchKey) int { return cmp.Compare(a.create, b.create) })
	for _, k := range c.gone {
		q := k.entry(indexIn(c.before, k.create), hb)
		t := EventLeft
		if q.holder {
			switch rel := seg + "/" + hex.EncodeToString(k.waiter[:]); {
			case released[rel]:
				t = EventReleased
			case forced[rel]:
				t = EventForceReleased
			default:
				t = EventExpired
			}
		}
		ev(t, q)
	}
	for i, k := range c.after[:ha] {
		if j := indexIn(c.before, k.create); j < 0 || j >= hb {
			ev(EventHeld, k.entry(i, ha))
		}
	}
	for _, create := range c.created {
		if i := indexIn(c.after, create); i >= ha {
			ev(EventQueued, c.after[i].entry(i, ha))
		}
	}
	return out
}
