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
	// Position is the key's place in line, numbered as the Acquire
	// stream numbers it (position): 0 for a holder, 1 for the waiter
	// granted next, and so on.
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
	limit  int  // the semaphore limit its value records; 0 for a value the engine cannot read
	holder bool // it holds by the grant rule (holders)
}

// Holder reports whether the entry holds the name by the grant rule
// (limit.go, holders): fewer keys ahead of it than its limit, all of its
// limit. A key that is first but whose grant is still to come — a
// lock-delay to wait out, a session waiter's move onto its session, an
// answer on its way — holds by that rule already: it is the key that
// keeps everyone behind it out, and it is granted with no other key's
// change. So every client that believes it holds is a holder here, and
// there are never more holders than the name's limit.
func (q QueueEntry) Holder() bool { return q.holder }

// LockInfo is one name's queue, read at one revision.
type LockInfo struct {
	// Name is the lock's name, or the election's for an election.
	Name string
	// Election is true for an election's queue (its leader is the
	// holder), false for a lock's or a semaphore's.
	Election bool
	// Entries are the name's keys in queue (FIFO) order; the holders come
	// first.
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
func (l LockInfo) Waiters() int64 {
	n := int64(0)
	for _, en := range l.Entries {
		if !en.holder {
			n++
		}
	}
	return n
}

// judge sets each entry's holder flag and Position by the grant rule; es
// are a name's keys in create order.
func judge(es []QueueEntry) {
	held := holders(len(es), func(i int) int { return es[i].limit })
	for i := range es {
		es[i].holder = i < held
		es[i].Position = 0
		if !es[i].holder {
			es[i].Position = position(int64(i), max(es[i].limit, 1))
		}
	}
}

// ListPage is one page of ListLocks.
type ListPage struct {
	// Locks in key order (by Cursor).
	Locks []LockInfo
	// More is true when names beyond the last one may exist.
	More bool
	// Revision is the revision every lock of the page was read at.
	Revision int64
}

// Names and elections share the key space under an engine's locks prefix:
// an election's segment begins with electionSeg (its NUL marker escaped),
// which sorts before every lock's (a lock name never contains a control
// character, so its segment never begins with "%0"). A view of a name
// prefix covers two ranges of segments, in key order: the elections whose
// names begin with it, then the locks whose names do.
var electionSeg = escapeName(electionMarker)

// segRange is a range of lock keys [from, end).
type segRange struct{ from, end string }

// nameRanges are the key ranges a view of prefix covers under base, the
// elections' first.
func nameRanges(base, prefix string) [2]segRange {
	el := base + electionSeg + escapeName(prefix)
	lk := base + escapeName(prefix)
	from := lk
	if prefix == "" {
		from = clientv3.GetPrefixRangeEnd(base + electionSeg) // behind every election
	}
	return [2]segRange{{el, clientv3.GetPrefixRangeEnd(el)}, {from, clientv3.GetPrefixRangeEnd(lk)}}
}

// segWithin reports whether a key segment is a name a view of prefix
// covers: an election's or a lock's whose name begins with prefix.
func segWithin(seg, prefix string) bool {
	if rest, ok := strings.CutPrefix(seg, electionSeg); ok {
		return strings.HasPrefix(rest, escapeName(prefix))
	}
	return strings.HasPrefix(seg, escapeName(prefix))
}

// NameCursor is a lock name's position in the key order ListLocks walks
// (an election's is NameCursor(ElectionName(name))).
func NameCursor(name string) string { return escapeName(name) }

// CursorInPrefix reports whether cursor (a LockInfo.Cursor) can continue
// a ListLocks walk of prefix: it is one name's segment, and a name of
// either kind that the walk covers.
func CursorInPrefix(cursor, prefix string) bool {
	return cursor != "" && !strings.Contains(cursor, "/") && segWithin(cursor, prefix)
}

// listBatch is how many keys one range read of ListLocks asks for at
// least; a page of n names asks for n plus this.
const listBatch = 64

// ListLocks reads up to limit names that begin with prefix and sort after
// the cursor after ("" for the first page), in key order, with their
// queues, all at one revision: the elections whose names begin with
// prefix first, then the locks. Holders' Expires are left zero: a caller
// that merges pages fills them with FillExpiry for the locks it keeps.
func (e *Engine) ListLocks(ctx context.Context, prefix, after string, limit int) (ListPage, error) {
	if limit <= 0 {
		return ListPage{}, fmt.Errorf("%w: list limit %d must be positive", ErrInvalidArgument, limit)
	}
	base := e.keys.locks()
	ranges := nameRanges(base, prefix)
	if after != "" {
		if !CursorInPrefix(after, prefix) {
			return ListPage{}, fmt.Errorf("%w: the cursor is not within the prefix", ErrInvalidArgument)
		}
		// Behind every key of the name at after: '0' follows '/'.
		next := base + after + "0"
		if strings.HasPrefix(after, electionSeg) {
			ranges[0].from = next
		} else {
			ranges[0].from = ranges[0].end // the elections are behind
			ranges[1].from = next
		}
	}
	var page ListPage
	for _, r := range ranges {
		if err := e.listRange(ctx, &page, base, r, limit); err != nil || page.More {
			return page, err
		}
	}
	return page, nil
}

// listRange adds the names of r to page, reading at page's revision (or
// setting it), until the page holds limit names (More set when others
// may follow).
func (e *Engine) listRange(ctx context.Context, page *ListPage, base string, r segRange, limit int) error {
	from := r.from
	for from < r.end {
		opts := []clientv3.OpOption{clientv3.WithRange(r.end), clientv3.WithLimit(int64(limit - len(page.Locks) + listBatch))}
		if page.Revision != 0 {
			opts = append(opts, clientv3.WithRev(page.Revision))
		}
		resp, err := e.cli.Get(ctx, from, opts...)
		if err != nil {
			return fmt.Errorf("queue: list locks: %w", err)
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
				return fmt.Errorf("queue: list locks: %w", err)
			}
			if g := groupByName(base, full.Kvs); len(g) == 1 {
				groups[len(groups)-1] = g[0]
			}
		}
		for _, g := range groups {
			if len(page.Locks) == limit {
				page.More = true
				return nil
			}
			from = base + g.seg + "0"
			info, err := g.info(page.Revision)
			if err != nil || len(info.Entries) == 0 {
				continue // not a lock key (foreign data under the prefix)
			}
			page.Locks = append(page.Locks, info)
		}
		if !resp.More {
			return nil
		}
		if len(groups) == 0 {
			// Only keys that are not a lock's: step over them.
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
			continue
		}
		if len(page.Locks) == limit {
			page.More = true
			return nil
		}
	}
	return nil
}

// DescribeQueue reads name's whole queue at one revision, its holders'
// expiry included. name is a lock's name or ElectionName of an election's.
func (e *Engine) DescribeQueue(ctx context.Context, name string) (LockInfo, error) {
	if err := ValidateKeyName(name); err != nil {
		return LockInfo{}, err
	}
	resp, err := e.cli.Get(ctx, e.keys.namePrefix(name), clientv3.WithPrefix())
	if err != nil {
		return LockInfo{}, fmt.Errorf("queue: describe queue: %w", err)
	}
	info := LockInfo{Revision: resp.Header.Revision, Cursor: escapeName(name)}
	info.Name, info.Election = nameOf(name)
	if gs := groupByName(e.keys.locks(), resp.Kvs); len(gs) == 1 {
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

// info decodes a group into a queue in FIFO (create revision) order,
// judged by the grant rule.
func (g nameGroup) info(rev int64) (LockInfo, error) {
	name, err := unescapeName(g.seg)
	if err != nil {
		return LockInfo{}, err
	}
	l := LockInfo{Revision: rev, Cursor: g.seg}
	l.Name, l.Election = nameOf(name)
	for _, kv := range g.kvs {
		l.Entries = append(l.Entries, entryOf(kv))
	}
	slices.SortFunc(l.Entries, func(a, b QueueEntry) int { return cmp.Compare(a.Revision, b.Revision) })
	judge(l.Entries)
	return l, nil
}

// nameOf splits an engine name into the name a caller knows and whether
// it is an election's.
func nameOf(engineName string) (string, bool) {
	if n, ok := ElectionOf(engineName); ok {
		return n, true
	}
	return engineName, false
}

// entryOf decodes one waiter key; Position and holder are left to judge.
// A value the engine cannot read is still a key of the queue (with limit
// 0: it withholds every grant behind it, as the hub judges it), with
// nothing but its identity.
func entryOf(kv *mvccpb.KeyValue) QueueEntry {
	q := QueueEntry{Revision: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease), Token: Token(0, kv.CreateRevision)}
	m, err := decodeValue(kv.Value)
	if err != nil {
		return q
	}
	q.ClientID, q.Enqueued, q.Session = m.ClientID, time.UnixMilli(m.Enqueued), m.Session
	q.Token, q.TTL, q.limit = Token(m.Epoch, kv.CreateRevision), time.Duration(m.TTL)*time.Second, max(m.Limit, 1)
	return q
}

// expiryLookups bounds the lease lookups one call runs at once.
const expiryLookups = 16

// FillExpiry asks etcd for the remaining TTL of every holder's lease (once
// per distinct lease, a few at a time) and sets Expires: one round trip
// per lease, so a page of locks with leases of their own costs one per
// lock.
func (e *Engine) FillExpiry(ctx context.Context, locks []LockInfo) error {
	var ids []clientv3.LeaseID
	seen := map[clientv3.LeaseID]bool{}
	for _, l := range locks {
		// Every holder: one for a lock, up to the limit for a semaphore.
		for _, en := range l.Entries {
			if id := en.lease; en.holder && id != 0 && !seen[id] {
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
		sem <- struct{}{}
		wg.Go(func() {
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
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	for i := range locks {
		for j := range locks[i].Entries {
			if en := &locks[i].Entries[j]; en.holder && en.lease != 0 {
				en.Expires = leases[en.lease]
			}
		}
	}
	return nil
}
