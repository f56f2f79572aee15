package gateway

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

// Seeing the fleet: ListLocks and DescribeQueue (this file) and Watch
// (watch.go) read every shard of the caller's tenant; AdminService
// (admin.go) acts on them.

// Page sizes of ListLocks and ListAudit.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

func pageSize(n int32) (int, error) {
	switch {
	case n == 0:
		return defaultPageSize, nil
	case n < 0 || n > maxPageSize:
		return 0, fieldOf("page_size", fmt.Errorf("%w: page size %d is outside 1 to %d", queue.ErrInvalidArgument, n, maxPageSize))
	}
	return int(n), nil
}

// validatePrefix checks a name prefix: empty, or the form of a name.
func validatePrefix(p string) error {
	if p == "" {
		return nil
	}
	return fieldOf("prefix", queue.ValidateName(p))
}

// listToken is what a ListLocks page token carries: the prefix it was
// issued for and the cursor of the page's last name. It is not secret and
// not signed: a forged one can only start a walk elsewhere within the
// caller's own tenant and prefix.
type listToken struct {
	Prefix string `json:"p"`
	Cursor string `json:"c"`
}

func encodeToken(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(field, tok string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || json.Unmarshal(b, v) != nil {
		return fieldOf(field, fmt.Errorf("%w: the token is malformed", queue.ErrInvalidArgument))
	}
	return nil
}

// ListLocks pages through the caller tenant's locks across every shard:
// each shard reads at most a page from the token's cursor, and the pages
// are merged in key order.
func (s *Service) ListLocks(ctx context.Context, req *connect.Request[v1.ListLocksRequest]) (*connect.Response[v1.ListLocksResponse], error) {
	prefix := req.Msg.Prefix
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	size, err := pageSize(req.Msg.PageSize)
	if err != nil {
		return nil, err
	}
	var tok listToken
	if req.Msg.PageToken != "" {
		if err := decodeToken("page_token", req.Msg.PageToken, &tok); err != nil {
			return nil, err
		}
		if tok.Prefix != prefix || !queue.CursorInPrefix(tok.Cursor, prefix) {
			return nil, fieldOf("page_token", fmt.Errorf("%w: the token belongs to another prefix", queue.ErrInvalidArgument))
		}
	}
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.lim.acquire(id); err != nil {
		return nil, err
	}
	targets, err := s.router.All(id.Tenant)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.storeTimeout(ctx)
	defer cancel()
	type shardPage struct {
		t    locks.Target
		page queue.ListPage
	}
	pages := make([]shardPage, len(targets))
	per := shardShare(size, len(targets))
	err = onShards(ctx, targets, func(ctx context.Context, i int, t locks.Target) error {
		pages[i].t = t
		var err error
		pages[i].page, err = t.Engine.ListLocks(ctx, prefix, tok.Cursor, per)
		return err
	})
	if err != nil {
		return nil, err
	}
	type item struct {
		t    locks.Target
		lock queue.LockInfo
	}
	// A shard that has more than it returned knows nothing beyond its last
	// lock: the page ends at the lowest such lock, so no name of any shard
	// is skipped.
	var all []item
	more, bound := false, ""
	for _, p := range pages {
		for _, l := range p.page.Locks {
			all = append(all, item{p.t, l})
		}
		if n := len(p.page.Locks); p.page.More && n > 0 {
			more = true
			if last := p.page.Locks[n-1].Cursor + "/"; bound == "" || last < bound {
				bound = last
			}
		}
	}
	// Key order: a name's keys are "<cursor>/…".
	slices.SortFunc(all, func(a, b item) int { return cmp.Compare(a.lock.Cursor+"/", b.lock.Cursor+"/") })
	if bound != "" {
		all = slices.DeleteFunc(all, func(it item) bool { return it.lock.Cursor+"/" > bound })
	}
	if len(all) > size {
		all, more = all[:size], true
	}
	// Lease expiries only for the locks kept: a lookup per lease.
	kept := make([][]queue.LockInfo, len(targets))
	idx := map[string]int{}
	for i, t := range targets {
		idx[t.Shard] = i
	}
	for _, it := range all {
		i := idx[it.t.Shard]
		kept[i] = append(kept[i], it.lock)
	}
	if err := onShards(ctx, targets, func(ctx context.Context, i int, t locks.Target) error {
		return t.Engine.FillExpiry(ctx, kept[i])
	}); err != nil {
		return nil, err
	}
	pos := make([]int, len(targets))
	for j, it := range all {
		i := idx[it.t.Shard]
		all[j].lock = kept[i][pos[i]]
		pos[i]++
	}
	out := &v1.ListLocksResponse{}
	for _, it := range all {
		out.Locks = append(out.Locks, lockSummary(it.t, it.lock))
	}
	if n := fit(s, out.Locks); n < len(out.Locks) {
		out.Locks, all, more = out.Locks[:n], all[:n], true
	}
	if more && len(all) > 0 {
		out.NextPageToken = encodeToken(listToken{Prefix: prefix, Cursor: all[len(all)-1].lock.Cursor})
	}
	return connect.NewResponse(out), nil
}

// fit returns how many of msgs, from the first, fit in one answer under
// the gateway's message size cap (with room for the rest of the answer);
// at least one.
func fit[M proto.Message](s *Service, msgs []M) int {
	budget := int(s.cfg.MaxBodyBytes) - 512
	total := 0
	for i, m := range msgs {
		total += proto.Size(m) + 4 // the field's tag and length
		if total > budget {
			return max(i, 1)
		}
	}
	return len(msgs)
}

// shardShare is how many locks each of n shards reads for a page of size:
// its even share and half again, so that most pages come out full while
// each costs about 1.5 pages of reads rather than n.
func shardShare(size, n int) int {
	if n <= 1 {
		return size
	}
	return min(size, (size*3+2*n-1)/(2*n)+4)
}

// onShards runs fn on every target at once, each through its breaker,
// and returns the first error.
func onShards(ctx context.Context, targets []locks.Target, fn func(ctx context.Context, i int, t locks.Target) error) error {
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = call(ctx, t, func(ctx context.Context) error { return fn(ctx, i, t) })
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// kindOf is the wire's kind of a queue.
func kindOf(election bool) v1.LockKind {
	if election {
		return v1.LockKind_LOCK_KIND_ELECTION
	}
	return v1.LockKind_LOCK_KIND_LOCK
}

func lockSummary(t locks.Target, l queue.LockInfo) *v1.LockSummary {
	out := &v1.LockSummary{Name: l.Name, Kind: kindOf(l.Election), Shard: t.Shard, Limit: int32(l.Limit()), Waiters: l.Waiters(), ShardBreaker: t.Backend.Breaker.State().String()}
	for _, h := range l.Entries {
		if !h.Holder() {
			break
		}
		out.Holders = append(out.Holders, &v1.LockHolder{
			ClientId: h.ClientID, FencingToken: h.Token, ExpiresAt: timestamppb.New(h.Expires),
			Since: timestamppb.New(h.Enqueued), Session: h.Session, TtlMs: h.TTL.Milliseconds(),
		})
	}
	return out
}

// DescribeQueue reports a name's holders and waiters in queue order: a
// lock's, or an election's.
func (s *Service) DescribeQueue(ctx context.Context, req *connect.Request[v1.DescribeQueueRequest]) (*connect.Response[v1.DescribeQueueResponse], error) {
	name := req.Msg.Name
	var election bool
	switch req.Msg.Kind {
	case v1.LockKind_LOCK_KIND_UNSPECIFIED, v1.LockKind_LOCK_KIND_LOCK:
	case v1.LockKind_LOCK_KIND_ELECTION:
		election = true
	default:
		return nil, fieldOf("kind", fmt.Errorf("%w: kind %d is neither a lock's nor an election's", queue.ErrInvalidArgument, req.Msg.Kind))
	}
	ctx, cancel, t, err := s.readTarget(ctx, name, election)
	if err != nil {
		return nil, err
	}
	defer cancel()
	key := name
	if election {
		key = queue.ElectionName(name)
	}
	var info queue.LockInfo
	if err := call(ctx, t, func(ctx context.Context) error {
		var err error
		info, err = t.Engine.DescribeQueue(ctx, key)
		return err
	}); err != nil {
		return nil, err
	}
	out := &v1.DescribeQueueResponse{Name: name, Kind: kindOf(election), Shard: t.Shard, Limit: int32(info.Limit()), Revision: info.Revision, ShardBreaker: t.Backend.Breaker.State().String(), Waiters: info.Waiters()}
	for _, en := range info.Entries {
		q := &v1.QueueEntry{
			ClientId: en.ClientID, Position: en.Position, WaitingSince: timestamppb.New(en.Enqueued),
			Session: en.Session, Holder: en.Holder(), TtlMs: en.TTL.Milliseconds(),
		}
		if en.Holder() {
			q.FencingToken, q.ExpiresAt = en.Token, timestamppb.New(en.Expires)
		}
		out.Entries = append(out.Entries, q)
	}
	out.Entries = out.Entries[:fit(s, out.Entries)]
	return connect.NewResponse(out), nil
}

// readTarget is what a read of one name's queue (Describe, DescribeQueue)
// starts with: the name checked, the caller authenticated and admitted by
// its rate limit, the store's timeout on ctx, and the shard that holds the
// name's holder — of the lock name, or of the election name. The returned
// cancel ends the timeout; it is nil on error.
func (s *Service) readTarget(ctx context.Context, name string, election bool) (context.Context, context.CancelFunc, locks.Target, error) {
	if err := queue.ValidateName(name); err != nil {
		return ctx, nil, locks.Target{}, fieldOf("name", err)
	}
	id, err := s.caller(ctx)
	if err != nil {
		return ctx, nil, locks.Target{}, err
	}
	if err := s.lim.acquire(id); err != nil {
		return ctx, nil, locks.Target{}, err
	}
	ctx, cancel := s.storeTimeout(ctx)
	key := name
	if election {
		key = queue.ElectionName(name)
	}
	t, err := s.holderShard(ctx, id, key)
	if err != nil {
		cancel()
		return ctx, nil, locks.Target{}, err
	}
	return ctx, cancel, t, nil
}

// holderShard routes name and, while it drains from a previous shard that
// still has keys of it, returns that shard: where its holder is. The
// route is taken before ctx's store timeout matters (it reads no etcd);
// the previous shard's check is bounded by ctx.
func (s *Service) holderShard(ctx context.Context, id Identity, name string) (locks.Target, error) {
	t, err := s.route(ctx, id, name)
	if err != nil {
		return t, err
	}
	if p := t.Previous; p != nil {
		var busy bool
		if err := call(ctx, *p, func(ctx context.Context) error {
			var err error
			busy, err = p.Engine.Occupied(ctx, name)
			return err
		}); err != nil {
			return t, err
		}
		if busy {
			return *p, nil
		}
	}
	return t, nil
}
