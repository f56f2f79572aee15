package gateway

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
		if tok.Prefix != prefix || strings.Contains(tok.Cursor, "/") || !strings.HasPrefix(tok.Cursor, queue.NameCursor(prefix)) {
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
	err = onShards(ctx, targets, func(ctx context.Context, i int, t locks.Target) error {
		pages[i].t = t
		var err error
		pages[i].page, err = t.Engine.ListLocks(ctx, prefix, tok.Cursor, size)
		return err
	})
	if err != nil {
		return nil, err
	}
	type item struct {
		t    locks.Target
		lock queue.LockInfo
	}
	var all []item
	more := false
	for _, p := range pages {
		more = more || p.page.More
		for _, l := range p.page.Locks {
			all = append(all, item{p.t, l})
		}
	}
	// Key order: a name's keys are "<cursor>/…".
	slices.SortFunc(all, func(a, b item) int { return cmp.Compare(a.lock.Cursor+"/", b.lock.Cursor+"/") })
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

func lockSummary(t locks.Target, l queue.LockInfo) *v1.LockSummary {
	out := &v1.LockSummary{Name: l.Name, Shard: t.Shard, Limit: 1, Waiters: l.Waiters(), ShardBreaker: t.Backend.Breaker.State().String()}
	if len(l.Entries) > 0 {
		h := l.Entries[0]
		out.Holders = []*v1.LockHolder{{
			ClientId: h.ClientID, FencingToken: h.Token, ExpiresAt: timestamppb.New(h.Expires),
			Since: timestamppb.New(h.Enqueued), Session: h.Session, TtlMs: h.TTL.Milliseconds(),
		}}
	}
	return out
}

// DescribeQueue reports a name's holders and waiters in queue order.
func (s *Service) DescribeQueue(ctx context.Context, req *connect.Request[v1.DescribeQueueRequest]) (*connect.Response[v1.DescribeQueueResponse], error) {
	name := req.Msg.Name
	if err := queue.ValidateName(name); err != nil {
		return nil, fieldOf("name", err)
	}
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.lim.acquire(id); err != nil {
		return nil, err
	}
	ctx, cancel := s.storeTimeout(ctx)
	defer cancel()
	t, err := s.holderShard(ctx, id, name)
	if err != nil {
		return nil, err
	}
	var info queue.LockInfo
	if err := call(ctx, t, func(ctx context.Context) error {
		var err error
		info, err = t.Engine.DescribeQueue(ctx, name)
		return err
	}); err != nil {
		return nil, err
	}
	out := &v1.DescribeQueueResponse{Name: name, Shard: t.Shard, Limit: 1, Revision: info.Revision, ShardBreaker: t.Backend.Breaker.State().String(), Waiters: info.Waiters()}
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

// holderShard routes name and, while it drains from a previous shard that
// still has keys of it, returns that shard: where its holder is.
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
