package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
)

// Store keeps the shard map in the home cluster, as the JSON of [Map] under
// the key <prefix>/shardmap, beside the layout record <prefix>/layout: the
// version of the etcd key layout of every cluster under the prefix
// ([KeyLayout]). The first map stored writes the record; every read of the
// map reads it in the same transaction and refuses (ErrLayout) a layout
// this build does not read, so a gateway or operator command of another
// layout never acts on the keys. Safe for concurrent use.
type Store struct {
	cli    *clientv3.Client
	key    string
	layout string

	// Watch's retry delays while the home cluster cannot be read.
	minBackoff, maxBackoff time.Duration
	// readTimeout bounds each read Watch makes, so a stuck read is retried.
	readTimeout time.Duration
	// onLayout hears Watch's refusals of the layout record; see OnLayoutChange.
	onLayout func(error)
}

// OnLayoutChange sets fn to hear, from Watch's goroutine, when the layout
// record as Watch reads it starts naming another layout (err wraps
// ErrLayout) and when it is this build's again (err nil). Call it before
// Watch.
func (s *Store) OnLayoutChange(fn func(err error)) { s.onLayout = fn }

// NewStore returns a store over cli. An empty prefix means DefaultPrefix.
func NewStore(cli *clientv3.Client, prefix string) *Store {
	return &Store{
		cli:         cli,
		key:         normPrefix(prefix) + "/shardmap",
		layout:      normPrefix(prefix) + "/layout",
		minBackoff:  50 * time.Millisecond,
		maxBackoff:  2 * time.Second,
		readTimeout: 5 * time.Second,
	}
}

// Key returns the key the map is stored under.
func (s *Store) Key() string { return s.key }

// Snapshot is a stored map together with the revision CompareAndSwap
// compares.
type Snapshot struct {
	// Map is the stored map; zero if none is stored.
	Map Map
	// ModRevision is the etcd mod revision of the stored map, 0 if none is
	// stored.
	ModRevision int64
}

// Load reads the stored map (a linearizable read). With no map stored it
// returns a zero Snapshot and ErrNoMap: pass that Snapshot to
// CompareAndSwap to store the first map.
func (s *Store) Load(ctx context.Context) (Snapshot, error) {
	snap, _, err := s.load(ctx)
	return snap, err
}

// KeyLayout is the version of the etcd key layout this build reads and
// writes (locks, queues, sessions, elections, records; docs/releasing.md).
// A release that changes what a key means or where it lives raises it,
// and reads the previous layout too or refuses it by this record.
const KeyLayout = 1

// load also returns the revision the read saw, where a watch can resume.
// It reads the layout record in the same transaction and refuses another
// layout; no record (a map not stored yet) is this build's.
func (s *Store) load(ctx context.Context) (Snapshot, int64, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.key), clientv3.OpGet(s.layout)).Commit()
	if err != nil {
		return Snapshot{}, 0, fmt.Errorf("shard: load %s: %w", s.key, err)
	}
	if err := s.checkLayout(resp.Responses[1].GetResponseRange().GetKvs()); err != nil {
		return Snapshot{}, resp.Header.Revision, err
	}
	snap, err := s.decode(resp.Responses[0].GetResponseRange().GetKvs())
	return snap, resp.Header.Revision, err
}

// checkLayout refuses a layout record, as read, of another layout.
func (s *Store) checkLayout(kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 0 || string(kvs[0].Value) == strconv.Itoa(KeyLayout) {
		return nil
	}
	return fmt.Errorf("%w: %s says the keys under it have layout %q; this build reads layout %d: "+
		"run a release that reads layout %q (or migrate the keys as its release notes say)", ErrLayout, s.layout, kvs[0].Value, KeyLayout, kvs[0].Value)
}

func (s *Store) decode(kvs []*mvccpb.KeyValue) (Snapshot, error) {
	if len(kvs) == 0 {
		return Snapshot{}, fmt.Errorf("%w at %s", ErrNoMap, s.key)
	}
	m, err := UnmarshalMap(kvs[0].Value)
	if err != nil {
		return Snapshot{}, fmt.Errorf("shard: map at %s (revision %d): %w", s.key, kvs[0].ModRevision, err)
	}
	return Snapshot{Map: m, ModRevision: kvs[0].ModRevision}, nil
}

// CompareAndSwap stores next if the stored map is still old (same
// ModRevision; a zero old means "none stored"), and returns next's
// Snapshot. If another writer got there first it returns the map now stored
// (zero if none) and an error wrapping ErrMapConflict (and ErrInvalidMap if
// what is stored does not decode). next must be valid,
// and when a map is stored it must follow from old.Map (see
// [CheckTransition]); otherwise the error wraps ErrInvalidMap and nothing
// is written. A layout record of another layout refuses it (ErrLayout).
func (s *Store) CompareAndSwap(ctx context.Context, old Snapshot, next Map) (Snapshot, error) {
	data, err := next.Marshal()
	if err != nil {
		return Snapshot{}, err
	}
	if old.ModRevision != 0 {
		if err := CheckTransition(old.Map, next); err != nil {
			return Snapshot{}, err
		}
	}
	// One transaction: the map is stored only over this layout's record,
	// or with the record when there is none yet (the first map); never
	// under another layout's record.
	layout := strconv.Itoa(KeyLayout)
	put := clientv3.OpPut(s.key, string(data))
	store := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(s.layout), "=", layout)},
		[]clientv3.Op{put},
		[]clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.layout), "=", 0)},
			[]clientv3.Op{put, clientv3.OpPut(s.layout, layout)},
			[]clientv3.Op{clientv3.OpGet(s.layout)})})
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(s.key), "=", old.ModRevision)).
		Then(store).
		Else(clientv3.OpGet(s.key)).
		Commit()
	if err != nil {
		return Snapshot{}, fmt.Errorf("shard: store map epoch %d at %s: %w", next.Epoch, s.key, err)
	}
	if resp.Succeeded {
		in := resp.Responses[0].GetResponseTxn()
		if in.GetSucceeded() || in.GetResponses()[0].GetResponseTxn().GetSucceeded() {
			return Snapshot{Map: next, ModRevision: resp.Header.Revision}, nil
		}
		return Snapshot{}, s.checkLayout(in.GetResponses()[0].GetResponseTxn().GetResponses()[0].GetResponseRange().GetKvs())
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	var rev int64
	if len(kvs) > 0 {
		rev = kvs[0].ModRevision
	}
	conflict := fmt.Errorf("%w: %s is at revision %d, not %d", ErrMapConflict, s.key, rev, old.ModRevision)
	cur, err := s.decode(kvs)
	if err != nil && !errors.Is(err, ErrNoMap) {
		return Snapshot{}, fmt.Errorf("%w; %w", conflict, err)
	}
	return cur, conflict
}

// CheckTransition reports whether next may replace cur as the stored map:
// the epoch never goes back; at the same epoch the clusters names are
// hashed over stay the same (endpoints, pending and draining may change);
// and a new epoch must be cur.Epoch+1 with the clusters of cur.Pending, so
// a map is always announced as pending before gateways route by it. Errors
// wrap ErrInvalidMap.
func CheckTransition(cur, next Map) error {
	curNames, nextNames := sortedNames(cur.Clusters), sortedNames(next.Clusters)
	switch {
	case next.Epoch < cur.Epoch:
		return fmt.Errorf("%w: epoch would go back from %d to %d", ErrInvalidMap, cur.Epoch, next.Epoch)
	case next.Epoch == cur.Epoch && !slices.Equal(curNames, nextNames):
		return fmt.Errorf("%w: clusters change from %q to %q within epoch %d", ErrInvalidMap, curNames, nextNames, cur.Epoch)
	case next.Epoch == cur.Epoch:
		return nil
	case next.Epoch != cur.Epoch+1 || cur.Pending == nil:
		return fmt.Errorf("%w: epoch %d follows epoch %d, want %d announced as pending first", ErrInvalidMap, next.Epoch, cur.Epoch, cur.Epoch+1)
	case !slices.Equal(sortedNames(cur.Pending.Clusters), nextNames):
		return fmt.Errorf("%w: epoch %d has clusters %q, but %q were pending", ErrInvalidMap, next.Epoch, nextNames, sortedNames(cur.Pending.Clusters))
	}
	return nil
}

func sortedNames(cs []Cluster) []string {
	n := names(cs)
	slices.Sort(n)
	return n
}

// Watch delivers the stored map and then every later one on the returned
// channel, until ctx is done, when it closes the channel. If no map is
// stored yet, the first delivery is the first map stored. The channel holds
// one map: a reader that falls behind gets the latest map, not every
// intermediate one (maps are states, not events); each map delivered is
// newer than the last. Values that do not decode or validate are skipped,
// so the last good map stays in force; a deleted map delivers nothing.
//
// Every map delivered was read in one transaction with the layout record:
// while the record names another layout Watch delivers nothing (the map
// in force stays) and says so through OnLayoutChange; when it is this
// build's again Watch delivers the map then stored.
//
// Watch never hangs on a broken watch: it watches with
// clientv3.WithRequireLeader, and on compaction, cancellation, leader loss
// or a closed watch it re-reads the map and watches again from there,
// retrying reads with backoff while the home cluster is unreachable. Cancel
// ctx before closing the client.
func (s *Store) Watch(ctx context.Context) <-chan Map {
	out := make(chan Map, 1)
	go s.watch(ctx, out, 0)
	return out
}

// watch feeds out until ctx is done. startRev > 0 skips the first read and
// watches from there (tests use it to force a compacted watch).
func (s *Store) watch(ctx context.Context, out chan Map, startRev int64) {
	defer close(out)
	var last int64 // ModRevision of the last map delivered
	deliver := func(m Map, rev int64) {
		if rev <= last {
			return
		}
		last = rev
		select { // only this goroutine sends: after this, the send cannot block
		case <-out:
		default:
		}
		out <- m
	}
	refused := false
	layout := func(err error) {
		if refused == (err != nil) {
			return
		}
		refused = err != nil
		if s.onLayout != nil {
			s.onLayout(err)
		}
	}
	rev, backoff := startRev, s.minBackoff
	retry := func() {
		clock.Sleep(ctx, clock.Real, backoff)
		backoff = min(2*backoff, s.maxBackoff)
	}
	for ctx.Err() == nil {
		if rev == 0 {
			var err error
			if rev, err = s.read(ctx, deliver, layout); err != nil {
				retry()
				continue
			}
		}
		if s.follow(ctx, rev) {
			backoff = s.minBackoff
		} else {
			retry() // refused at once (no leader?): do not spin
		}
		rev = 0
	}
}

// read loads the map and the layout record in one transaction, delivers
// the map if there is one under this build's layout, tells layout how the
// record reads, and returns the revision to watch from.
func (s *Store) read(ctx context.Context, deliver func(Map, int64), layout func(error)) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, s.readTimeout)
	defer cancel()
	snap, rev, err := s.load(rctx)
	switch {
	case errors.Is(err, ErrLayout):
		layout(err)
	case err == nil:
		layout(nil)
		deliver(snap.Map, snap.ModRevision)
	case errors.Is(err, ErrNoMap), errors.Is(err, ErrInvalidMap):
		layout(nil)
	default:
		return 0, err
	}
	return rev + 1, nil
}

// follow watches the map and the layout record from rev until either
// changes or the watch ends for any reason (compaction, cancellation
// when the leader is lost, an error, ctx done); the caller then reads
// both again in one transaction, so a map is never taken from an event
// whose layout record it did not read with it. It reports whether the
// watch saw a change (or a compaction: re-read at once) before it ended.
func (s *Store) follow(ctx context.Context, rev int64) (progressed bool) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel() // also ends the server-side watches
	maps := s.cli.Watch(wctx, s.key, clientv3.WithRev(rev))
	layouts := s.cli.Watch(wctx, s.layout, clientv3.WithRev(rev))
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-maps:
		case resp, ok = <-layouts:
		}
		switch {
		case !ok:
			return false
		case resp.Canceled || resp.CompactRevision != 0 || resp.Err() != nil:
			// Compaction is not the cluster refusing us: re-read at once.
			return resp.CompactRevision != 0
		case len(resp.Events) > 0:
			return true
		}
	}
}
