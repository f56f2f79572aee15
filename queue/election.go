package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	leasegatev1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// Elections.
//
// An election is a lock whose holder is the leader: a campaign is an
// Acquire on ElectionName(name), so campaigners queue in FIFO order, the
// leader's key is the first by create revision, a term's fencing token is
// that key's token and grows with every term, and renew, release (resign),
// sessions and cleanup are the lock's own. The election adds a value to
// the waiter's record (waiterMeta.Value), Proclaim to change it, and two
// reads: Leader and Observe.
//
// An election's engine name is its name behind a marker that begins with
// NUL. ValidateName refuses NUL in every lock name, and escapeName writes
// it as "%00", so no lock's keys share a prefix with an election's: lock
// "x" and election "x" are different queues on any shard, with the same
// escaping and the same one name per key segment.
const electionMarker = "\x00election:"

// MaxValueLen is the longest election value, in bytes.
const MaxValueLen = leasegatev1.MaxValueBytes

// ElectionName is the engine name of election name: the name an election's
// AcquireRequest and Handle carry.
func ElectionName(name string) string { return electionMarker + name }

// ElectionOf returns the election name behind an engine name made by
// ElectionName, and false for a lock's name.
func ElectionOf(engineName string) (string, bool) {
	return strings.CutPrefix(engineName, electionMarker)
}

// ValidateKeyName accepts what the engine keys a queue by: a lock name
// (ValidateName) or ElectionName of one.
func ValidateKeyName(name string) error {
	if n, ok := ElectionOf(name); ok {
		return ValidateName(n)
	}
	return ValidateName(name)
}

func validateValue(name string, value []byte) error {
	if len(value) == 0 {
		return nil
	}
	if _, ok := ElectionOf(name); !ok {
		return fmt.Errorf("%w: only an election's campaign carries a value", ErrInvalidArgument)
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("%w: value is %d bytes; the limit is %d", ErrInvalidArgument, len(value), MaxValueLen)
	}
	return nil
}

// Leader describes an election's leader.
type Leader struct {
	// Value is what the leader campaigned with or last proclaimed.
	Value []byte
	// Token is the term's fencing token.
	Token int64
	// ClientID is the leader's self-reported identity.
	ClientID string

	key      string
	revision int64 // the key's create revision: the term's identity
}

// sameAs reports whether l and o describe the same term with the same
// value (nil for no leader).
func (l *Leader) sameAs(o *Leader) bool {
	if l == nil || o == nil {
		return l == o
	}
	return l.revision == o.revision && bytes.Equal(l.Value, o.Value) && l.ClientID == o.ClientID
}

func leaderOf(kv *mvccpb.KeyValue) (*Leader, error) {
	if kv == nil {
		return nil, nil
	}
	meta, err := decodeValue(kv.Value)
	if err != nil {
		return nil, err
	}
	return &Leader{Value: meta.Value, Token: Token(meta.Epoch, kv.CreateRevision), ClientID: meta.ClientID,
		key: string(kv.Key), revision: kv.CreateRevision}, nil
}

// Leader reads election's leader: the first key of its queue by create
// revision, in one read. It answers ErrNoLeader when nobody leads. A
// campaigner that is first but whose grant is still being made (its lease
// renewed, or moved onto its session) is reported as the leader: nothing
// can come before it any more.
func (e *Engine) Leader(ctx context.Context, election string) (*Leader, error) {
	if err := ValidateName(election); err != nil {
		return nil, err
	}
	resp, err := e.cli.Get(ctx, e.keys.namePrefix(ElectionName(election)), clientv3.WithFirstCreate()...)
	if err != nil {
		return nil, fmt.Errorf("queue: read leader: %w", err)
	}
	l, err := leaderOf(firstOf(resp.Kvs))
	if err == nil && l == nil {
		err = fmt.Errorf("%w: election %q", ErrNoLeader, election)
	}
	return l, err
}

// Proclaim replaces the value of the leader that h names.
//
// It reads the leader's key, then writes it again with the new value in
// one transaction that compares the key's create revision (the same term),
// its mod revision (the record just read: nothing took the key over in
// between), its lease and the secret (the caller owns it), and that no key
// of the election has a lower create revision (the key is first: it
// leads). A write that loses a race with a takeover is retried; anything
// else is refused with ErrNotLeader joined with ErrExpired or ErrStolen, or
// with ErrNotOwner when the key is the same but the id does not prove it.
//
// The write moves the key's mod revision, which is also the identity of
// the attempt that wrote it last: see "Proclaim and attempt identity" in
// doc.go for why no attempt's compare misfires on it.
func (e *Engine) Proclaim(ctx context.Context, h Handle, value []byte) error {
	if _, ok := ElectionOf(h.Name); !ok {
		return fmt.Errorf("%w: the id names a lock, not an election's leader", ErrInvalidArgument)
	}
	if len(value) > MaxValueLen {
		return fieldErr("Value", fmt.Errorf("%w: value is %d bytes; the limit is %d", ErrInvalidArgument, len(value), MaxValueLen))
	}
	prefix := e.keys.namePrefix(h.Name)
	key := prefix + h.WaiterID
	for try := 0; ; try++ {
		resp, err := e.cli.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("queue: proclaim: %w", err)
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.Revision {
			return errors.Join(ErrNotLeader, e.classifyGone(ctx, h.Name))
		}
		mine := resp.Kvs[0]
		meta, err := decodeValue(mine.Value)
		if err != nil || !hasHeader(mine.Value, h.Secret) || clientv3.LeaseID(mine.Lease) != h.Lease {
			return fmt.Errorf("%w: the leader id does not match the leader's secret or lease", ErrNotOwner)
		}
		meta.Value = bytes.Clone(value)
		cmps := append([]clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(key), "=", h.Revision),
			clientv3.Compare(clientv3.ModRevision(key), "=", mine.ModRevision),
			clientv3.Compare(clientv3.LeaseValue(key), "=", h.Lease),
			// Every key of the election was created at or after this one.
			clientv3.Compare(clientv3.CreateRevision(prefix).WithPrefix(), ">", h.Revision-1),
		}, ownerCmps(key, h.Secret)...)
		e.at(ctx, pointProclaim)
		tr, err := e.cli.Txn(ctx).If(cmps...).
			Then(clientv3.OpPut(key, encodeValue(h.Secret, meta), clientv3.WithLease(h.Lease))).
			Commit()
		if err != nil {
			return fmt.Errorf("queue: proclaim: %w", err)
		}
		if tr.Succeeded {
			return nil
		}
		if try >= 3 {
			return fmt.Errorf("queue: proclaim: the leader's key kept changing under the write; retry")
		}
	}
}

// Observe calls fn with election's leader (nil when nobody leads) now, and
// then whenever the leader or its value changes, until ctx ends or fn
// returns an error, which Observe returns (ErrClosed when the engine
// closes). It follows one etcd watch of the election's keys and never
// polls: a watch starts at the revision of the read before it, so nothing
// between the two is missed. When the leader's key goes, or the watch
// fails (compaction, a member without a leader), Observe reads the state
// again and watches from there: it never reports a state older than one
// already reported, though it can skip states that came and went while it
// re-read.
func (e *Engine) Observe(ctx context.Context, election string, fn func(*Leader) error) error {
	return e.observeLeader(ctx, election, fn, nil)
}

// errRewatch ends one watch of observe: read again, then watch again.
var errRewatch = errors.New("rewatch")

// observeLeader is Observe; beforeWatch, when set, runs after each read with its
// revision, before the watch from that revision opens (tests compact
// history there).
func (e *Engine) observeLeader(ctx context.Context, election string, fn func(*Leader) error, beforeWatch func(rev int64)) error {
	if err := ValidateName(election); err != nil {
		return err
	}
	// An observer ends with its engine too.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(e.ctx, func() { cancel(ErrClosed) })()
	prefix := e.keys.namePrefix(ElectionName(election))
	var last *Leader
	reported := false
	report := func(l *Leader) error {
		if reported && l.sameAs(last) {
			return nil
		}
		last, reported = l, true
		return fn(l)
	}
	b := newBackoff(e.cfg.Clock)
	for {
		resp, err := e.cli.Get(ctx, prefix, clientv3.WithFirstCreate()...)
		var cur *Leader
		if err == nil && len(resp.Kvs) > 0 {
			cur, err = leaderOf(resp.Kvs[0])
		}
		if err != nil {
			if b.wait(ctx) != nil {
				return context.Cause(ctx)
			}
			continue
		}
		if err := report(cur); err != nil {
			return err
		}
		if beforeWatch != nil {
			beforeWatch(resp.Header.Revision)
		}
		wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := e.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		err = e.follow(wch, cur, report)
		stop()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !errors.Is(err, errRewatch) {
			return err
		}
		if errors.Is(err, errWatchFailed) {
			if b.wait(ctx) != nil {
				return context.Cause(ctx)
			}
		} else {
			b.reset()
		}
	}
}

// errWatchFailed is an errRewatch after a failed or closed watch, which
// backs off before the next read; a leader that left does not.
var errWatchFailed = fmt.Errorf("%w: watch failed", errRewatch)

// follow reports changes of the leader cur from the watch's events until
// the leader's key goes (errRewatch), the watch fails (errWatchFailed) or
// report fails. A put on the leader's key is a proclaim, a takeover or its
// move onto a session: its value is reported if it changed. A key created
// while nobody leads is the new leader: the first event to create one has
// the lowest create revision of all that follow.
func (e *Engine) follow(wch clientv3.WatchChan, cur *Leader, report func(*Leader) error) error {
	for wr := range wch {
		if wr.Err() != nil || wr.Canceled {
			return errWatchFailed
		}
		for _, ev := range wr.Events {
			switch {
			case cur != nil && string(ev.Kv.Key) == cur.key:
				if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != cur.revision {
					return errRewatch
				}
			case cur == nil && ev.Type == mvccpb.PUT && ev.IsCreate():
			default:
				continue
			}
			l, err := leaderOf(ev.Kv)
			if err != nil {
				return errWatchFailed
			}
			cur = l
			if err := report(l); err != nil {
				return err
			}
		}
	}
	return errWatchFailed
}
