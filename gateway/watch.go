package gateway

import (
	"context"
	"errors"
	"maps"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

// Watch streams.
//
// The fleet watches the caller's tenant on every shard (locks.Router.Watch)
// and hands each shard's batches to the stream's goroutine, which keeps
// the resume token — the prefix and, per shard, the revision the client's
// view has reached — and sends one message per batch. A shard's revision
// moves only when its snapshot is complete or its events are sent, so a
// token never points into the middle of a snapshot: a client resuming
// from it gets that shard's snapshot again. A shard whose history was
// compacted sends RESYNC and a fresh snapshot.

// watchToken is what a resume token carries.
type watchToken struct {
	Prefix string           `json:"p"`
	Revs   map[string]int64 `json:"r,omitempty"`
}

// Watch streams the caller tenant's lock events under a prefix.
func (s *Service) Watch(ctx context.Context, req *connect.Request[v1.WatchRequest], stream *connect.ServerStream[v1.WatchResponse]) error {
	prefix := req.Msg.Prefix
	if err := validatePrefix(prefix); err != nil {
		return err
	}
	tok := watchToken{Prefix: prefix}
	if err := decodeToken("resume_token", req.Msg.ResumeToken, &tok, func() bool { return tok.Prefix == prefix }); err != nil {
		return err
	}
	id, err := s.admit(ctx)
	if err != nil {
		return err
	}
	// An open watch costs like an open wait (a stream, goroutines, and the
	// queues under its prefix in memory): it counts against the same cap.
	end, err := s.lim.startWait(id)
	if err != nil {
		return err
	}
	defer end()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from := map[string]int64{}
	for sh, r := range tok.Revs {
		if r > 0 {
			from[sh] = r
		}
	}
	shards, ch, err := s.router.Watch(ctx, id.Tenant, prefix, from)
	if err != nil {
		return err
	}
	defer func() {
		cancel()
		for range ch { // every shard's watch has ended once it closes
		}
	}()
	revs := map[string]int64{}
	for _, sh := range shards {
		if r := from[sh]; r > 0 {
			revs[sh] = r
		}
	}
	token := func() string { return encodeToken(watchToken{Prefix: prefix, Revs: maps.Clone(revs)}) }
	// The response headers go at once: a client knows the watch is open even
	// when nothing happens for a while (a resumed watch on a quiet tenant).
	if err := s.send(ctx, func() error { return stream.Send(nil) }); err != nil {
		return err
	}
	// A quiet stream still sends a PROGRESS message every watchProgressEvery,
	// within SendTimeout like any message: a client that stopped reading is
	// dropped on a quiet tenant too.
	idle := s.clk.NewTimer(watchProgressEvery)
	defer func() { idle.Stop() }()
	send := func(msg *v1.WatchResponse) error {
		msg.ResumeToken = token()
		if err := s.send(ctx, func() error { return stream.Send(msg) }); err != nil {
			return err
		}
		idle.Stop()
		idle = s.clk.NewTimer(watchProgressEvery)
		return nil
	}
	for {
		var b locks.WatchBatch
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.shutdown:
			return errShuttingDown
		case <-idle.C():
			if err := send(&v1.WatchResponse{Kind: v1.WatchMessageKind_WATCH_MESSAGE_KIND_PROGRESS}); err != nil {
				return err
			}
			continue
		case b = <-ch:
		}
		if b.Err != nil {
			if errors.Is(b.Err, queue.ErrInvalidArgument) {
				return fieldOf("resume_token", b.Err)
			}
			return onShard(b.Shard, b.Err)
		}
		if b.Resync {
			delete(revs, b.Shard)
		}
		for _, m := range watchMessages(b, int(s.cfg.MaxBodyBytes)-1024) {
			if m.rev != 0 {
				revs[b.Shard] = m.rev
			}
			if m.msg == nil {
				continue // nothing to show: the next message's token covers it
			}
			if err := send(m.msg); err != nil {
				return err
			}
		}
	}
}

// watchProgressEvery is the longest a Watch stream goes without a message:
// the PROGRESS message it then sends carries the latest resume token.
var watchProgressEvery = 5 * time.Second

// maxWatchEvents is the most events in one message: far below the message
// size cap (64 KiB by default) even for the longest names and client ids.
const maxWatchEvents = 100

// watchMessage is one message to send and the shard revision its token
// records (0: unchanged); a nil msg only moves the revision.
type watchMessage struct {
	msg *v1.WatchResponse
	rev int64
}

// watchMessages cuts a shard's batch into messages of at most
// maxWatchEvents events and about budget bytes. Live events are cut at
// revision boundaries, each token recording the last revision its message
// completes; a revision with more events than fit (a revoked lease with many
// keys) spans messages, all but the last carrying the previous revision's
// token: the only case where a resumed stream repeats an event.
func watchMessages(b locks.WatchBatch, budget int) []watchMessage {
	shards := []string{b.Shard}
	pevs := lockEvents(b.Shard, b.Events)
	// fits is how many of the events from i fit in one message.
	fits := func(i int) int {
		total, n := 0, 0
		for n < maxWatchEvents && i+n < len(pevs) {
			total += proto.Size(pevs[i+n]) + 4
			if total > budget && n > 0 {
				break
			}
			n++
		}
		return n
	}
	switch {
	case b.Resync:
		return []watchMessage{{msg: &v1.WatchResponse{Kind: v1.WatchMessageKind_WATCH_MESSAGE_KIND_RESYNC, Shards: shards}}}
	case b.Snapshot:
		var out []watchMessage
		for i := 0; i < len(pevs); {
			n := fits(i)
			out = append(out, watchMessage{msg: &v1.WatchResponse{Kind: v1.WatchMessageKind_WATCH_MESSAGE_KIND_SNAPSHOT, Shards: shards, Events: pevs[i : i+n]}})
			i += n
		}
		if b.SnapshotDone {
			out = append(out, watchMessage{msg: &v1.WatchResponse{Kind: v1.WatchMessageKind_WATCH_MESSAGE_KIND_SNAPSHOT_END, Shards: shards}, rev: b.Revision})
		}
		return out
	case len(pevs) == 0:
		return []watchMessage{{rev: b.Revision}}
	}
	var out []watchMessage
	evs := b.Events
	done := int64(0) // the last revision whose events are all in messages
	for i := 0; i < len(evs); {
		n := fits(i)
		if end := i + n; end < len(evs) && evs[end].Revision == evs[end-1].Revision {
			// Cut before the revision that would straddle, unless it alone fills the message.
			cut := end
			for cut > i && evs[cut-1].Revision == evs[end].Revision {
				cut--
			}
			if cut > i {
				n = cut - i
			}
		}
		end := i + n
		rev := evs[end-1].Revision
		if end < len(evs) && evs[end].Revision == rev {
			rev = done // the revision goes on in the next message
		} else {
			done = rev
		}
		out = append(out, watchMessage{msg: &v1.WatchResponse{Kind: v1.WatchMessageKind_WATCH_MESSAGE_KIND_EVENTS, Events: pevs[i:end]}, rev: rev})
		i = end
	}
	// The batch's revision may pass its last event's (revisions without
	// events for this prefix).
	out[len(out)-1].rev = b.Revision
	return out
}

func lockEvents(shard string, evs []queue.WatchEvent) []*v1.LockEvent {
	out := make([]*v1.LockEvent, 0, len(evs))
	for _, ev := range evs {
		e := &v1.LockEvent{
			Type: eventTypes[ev.Type], Name: ev.Name, Kind: kindOf(ev.Election), Shard: shard, ClientId: ev.Entry.ClientID,
			Position: ev.Entry.Position, Session: ev.Entry.Session, Revision: ev.Revision,
			EnqueuedAt: timestamppb.New(ev.Entry.Enqueued),
		}
		if ev.Type != queue.EventQueued && ev.Type != queue.EventLeft {
			e.FencingToken = ev.Entry.Token
		}
		out = append(out, e)
	}
	return out
}

var eventTypes = map[queue.EventType]v1.LockEventType{
	queue.EventHeld:          v1.LockEventType_LOCK_EVENT_TYPE_HELD,
	queue.EventQueued:        v1.LockEventType_LOCK_EVENT_TYPE_QUEUED,
	queue.EventReleased:      v1.LockEventType_LOCK_EVENT_TYPE_RELEASED,
	queue.EventExpired:       v1.LockEventType_LOCK_EVENT_TYPE_EXPIRED,
	queue.EventForceReleased: v1.LockEventType_LOCK_EVENT_TYPE_FORCE_RELEASED,
	queue.EventLeft:          v1.LockEventType_LOCK_EVENT_TYPE_LEFT,
}
