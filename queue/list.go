package queue

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Reading many locks at once: ListLocks, DescribeQueue and the snapshot of
// WatchLocks.
//
// A name's keys are contiguous in key order (its escaped segment never
// contains '/', so no other name's keys fall between them), and the names
// themselves sort by "segment/". A page is a range read from a cursor with
// a limit, at one revision: its cost is bounded by the page size and the
// queues' lengths, never by how many locks exist.

// QueueEntry is one key of a name's queue as an observer sees it. It never
// carries the key's secret, request id or waiter id.
type QueueEntry struct {
	// ClientID is the self-reported identity of the key's acquire.
	ClientID string
	// Position counts the keys ahead: 0 for the holder.
	Position int64
	// Enqueued is when the key enqueued (the enqueuing gateway's clock).
	Enqueued time.Time
	// Session is true for a lock in a session.
	Session bool
	// Token is the fencing token the key has or will have when granted.
	Token int64
	// TTL is the key's lease TTL as enqueued.
	TTL time.Duration
	// Expires is set for holders read by ListLocks and DescribeQueue: when
	// the lease lapses unless renewed, from etcd's remaining TTL.
	Expires time.Time
	// Revision is the key's create revision: its identity.
	Revision int64

	lease  clientv3.LeaseID
	waiter string // the key's last segment, for the watch's bookkeeping
	limit  int    // the semaphore limit its value records (1 for a lock)
}

// Holder reports whether the entry holds the lock: one of the first limit
// keys of its name (the first, for a lock).
func (q QueueEntry) Holder() bool { return q.Position < int64(max(q.limit, 1)) }

// LockInfo is one name's queue, read at one revision.
type LockInfo struct {
	// Name is the lock name.
	Name string
	// Entries are the name's keys in queue (FIFO) order; the first holds.
	Entries []QueueEntry
	// Revision is the etcd revision the queue was read at.
	Revision int64
	// Cursor is the name's position in key order (its escaped segment):
	// pass it as ListLocks' after to continue behind it.
	Cursor string
}

// Limit is the name's semaphore limit, as its first key records it (1 for
// a lock or an empty queue).
func (l LockInfo) Limit() int {
	if len(l.Entries) == 0 {
		return 1
	}
	return max(l.Entries[0].limit, 1)
}

// Waiters counts the entries behind the holders.
func (l LockInfo) Waiters() int64 { return int64(max(len(l.Entries)-l.Limit(), 0)) }

// ListPage is one page of ListLocks.
type ListPage struct {
	// Locks in key order (by Cursor).
	Locks []LockInfo
	// More is true when names beyond the last one may exist.
	More bool
	// Revision is the revision every lock of the page was read at.
	Revision int64
}

// NameCursor is name's position in the key order ListLocks walks.
func NameCursor(name string) string { return escapeName(name) }

// listBatch is how many keys one range read of ListLocks asks for at
// least; a page of n names asks for n plus this.
const listBatch = 64

// ListLocks reads up to limit names that begin with prefix and sort after
// the cursor after ("" for the first page), in key order, with their
// queues, all at one revision. Holders' Expires are left zero: a caller
// that merges pages fills them with FillExpiry for the locks it keeps.
func (e *Engine) ListLocks(ctx context.Context, prefix, after string, limit int) (ListPage, error) {
	defer e.enter()()
	if limit <= 0 {
		return ListPage{}, fmt.Errorf("%w: list limit %d must be positive", ErrInvalidArgument, limit)
	}
	base := LocksPrefix(e.cfg.Prefix)
	from := base + escapeName(prefix)
	end := clientv3.GetPrefixRangeEnd(from)
	if after != "" {
		if !strings.HasPrefix(after, escapeName(prefix)) {
			return ListPage{}, fmt.Errorf("%w: the cursor is not within the prefix", ErrInvalidArgument)
		}
		// Behind every key of the name at after: '0' follows '/'.
		from = base + after + "0"
	}
	var page ListPage
read:
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(limit - len(page.Locks) + listBatch))}
		if page.Revision != 0 {
			opts = append(opts, clientv3.WithRev(page.Revision))
		}
		resp, err := e.cli.Get(ctx, from, opts...)
		if err != nil {
			return ListPage{}, fmt.Errorf("queue: list locks: %w", err)
		}
		if page.Revision == 0 {
			page.Revision = resp.Header.Revision
		}
		groups := groupByName(base, resp.Kvs)
		if resp.More && len(groups) > 0 && len(groups)-1 < limit-len(page.Locks) {
			// The last name may go on beyond the read: read it whole, at
			// the same revision.
			last := groups[len(groups)-1]
			full, err := e.cli.Get(ctx, base+last.seg+"/", clientv3.WithPrefix(), clientv3.WithRev(page.Revision))
			if err != nil {
				return ListPage{}, fmt.Errorf("queue: list locks: %w", err)
			}
			if g := groupByName(base, full.Kvs); len(g) == 1 {
				groups[len(groups)-1] = g[0]
			}
		}
		for _, g := range groups {
			if len(page.Locks) == limit {
				page.More = true
				break read
			}
			from = base + g.seg + "0"
			info, err := g.info(page.Revision)
			if err != nil || len(info.Entries) == 0 {
				continue // not a lock key (foreign data under the prefix)
			}
			page.Locks = append(page.Locks, info)
		}
		if !resp.More {
			break
		}
		if len(groups) == 0 {
			// Only keys that are not a lock's: step over them.
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
			continue
		}
		if len(page.Locks) == limit {
			page.More = true
			break
		}
	}
	return page, nil
}

// DescribeQueue reads name's whole queue at one revision, its holder's
// expiry included.
func (e *Engine) DescribeQueue(ctx context.Context, name string) (LockInfo, error) {
	defer e.enter()()
	if err := ValidateName(name); err != nil {
		return LockInfo{}, err
	}
	resp, err := e.cli.Get(ctx, e.keys.namePrefix(name), clientv3.WithPrefix())
	if err != nil {
		return LockInfo{}, fmt.Errorf("queue: describe queue: %w", err)
	}
	info := LockInfo{Name: name, Revision: resp.Header.Revision, Cursor: escapeName(name)}
	if gs := groupByName(LocksPrefix(e.cfg.Prefix), resp.Kvs); len(gs) == 1 {
		if info, err = gs[0].info(resp.Header.Revision); err != nil {
			return LockInfo{}, err
		}
	}
	locks := []LockInfo{info}
	if err := e.FillExpiry(ctx, locks); err != nil {
		return LockInfo{}, err
	}
	return locks[0], nil
}

// nameGroup is the keys of one name, in key order.
type nameGroup struct {
	seg string
	kvs []*mvccpb.KeyValue
}

// groupByName splits kvs (in key order, under base) by name segment.
func groupByName(base string, kvs []*mvccpb.KeyValue) []nameGroup {
	var out []nameGroup
	for _, kv := range kvs {
		rest, ok := strings.CutPrefix(string(kv.Key), base)
		if !ok {
			continue
		}
		seg, _, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		if n := len(out); n > 0 && out[n-1].seg == seg {
			out[n-1].kvs = append(out[n-1].kvs, kv)
			continue
		}
		out = append(out, nameGroup{seg: seg, kvs: []*mvccpb.KeyValue{kv}})
	}
	return out
}

// info decodes a group into a queue in FIFO (create revision) order.
func (g nameGroup) info(rev int64) (LockInfo, error) {
	name, err := unescapeName(g.seg)
	if err != nil {
		return LockInfo{}, err
	}
	l := LockInfo{Name: name, Revision: rev, Cursor: g.seg}
	for _, kv := range g.kvs {
		q, err := entryOf(kv)
		if err != nil {
			continue
		}
		l.Entries = append(l.Entries, q)
	}
	slices.SortFunc(l.Entries, func(a, b QueueEntry) int { return cmp.Compare(a.Revision, b.Revision) })
	lim := l.Limit()
	for i := range l.Entries {
		// A semaphore's keys share its limit while they hold (limit.go);
		// the first key's is the name's.
		l.Entries[i].Position, l.Entries[i].limit = int64(i), lim
	}
	return l, nil
}

// entryOf decodes one waiter key; Position is left to the caller.
func entryOf(kv *mvccpb.KeyValue) (QueueEntry, error) {
	_, m, err := decodeValue(kv.Value)
	if err != nil {
		return QueueEntry{}, err
	}
	k := string(kv.Key)
	return QueueEntry{
		ClientID: m.ClientID,
		Enqueued: time.UnixMilli(m.Enqueued),
		Session:  m.Session,
		Token:    Token(m.Epoch, kv.CreateRevision),
		TTL:      time.Duration(m.TTL) * time.Second,
		Revision: kv.CreateRevision,
		lease:    clientv3.LeaseID(kv.Lease),
		waiter:   k[strings.LastIndexByte(k, '/')+1:],
		limit:    max(m.Limit, 1),
	}, nil
}

// expiryLookups bounds the lease lookups one call runs at once.
const expiryLookups = 16

// FillExpiry asks etcd for the remaining TTL of every holder's lease (once
// per distinct lease, a few at a time) and sets Expires: one round trip
// per lease, so a page of locks with leases of their own costs one per
// lock.
func (e *Engine) FillExpiry(ctx context.Context, locks []LockInfo) error {
	defer e.enter()()
	var ids []clientv3.LeaseID
	seen := map[clientv3.LeaseID]bool{}
	for _, l := range locks {
		// Every holder: one for a lock, up to the limit for a semaphore.
		for _, en := range l.Entries {
			if id := en.lease; en.Holder() && id != 0 && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		first  error
		sem    = make(chan struct{}, expiryLookups)
		leases = make(map[clientv3.LeaseID]time.Time, len(ids)) // written by the lookups
	)
	now := e.cfg.Clock.Now()
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ttl, err := e.cli.TimeToLive(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("queue: read holder lease: %w", err)
				}
				return
			}
			leases[id] = now.Add(time.Duration(max(ttl.TTL, 0)) * time.Second)
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	for i := range locks {
		for j := range locks[i].Entries {
			if en := &locks[i].Entries[j]; en.Holder() && en.lease != 0 {
				en.Expires = leases[en.lease]
			}
		}
	}
	return nil
}
