package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

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

// decodeToken reads tok, a page or resume token, into v (an empty tok
// leaves v as it is); ours, when set, says whether v is for this prefix.
func decodeToken(field, tok string, v any, ours func() bool) error {
	if tok == "" {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || json.Unmarshal(b, v) != nil {
		return fieldOf(field, fmt.Errorf("%w: the token is malformed", queue.ErrInvalidArgument))
	}
	if ours != nil && !ours() {
		return fieldOf(field, fmt.Errorf("%w: the token belongs to another prefix", queue.ErrInvalidArgument))
	}
	return nil
}

// ListLocks pages through the caller tenant's locks across every shard,
// merged in key order.
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
	if err := decodeToken("page_token", req.Msg.PageToken, &tok, func() bool { return tok.Prefix == prefix && queue.CursorInPrefix(tok.Cursor, prefix) }); err != nil {
		return nil, err
	}
	id, err := s.admit(ctx)
	if err != nil {
		return nil, err
	}
	all, more, err := s.router.ListLocks(ctx, id.Tenant, prefix, tok.Cursor, size)
	if err != nil {
		return nil, err
	}
	msgs, next := page(s, all, more, lockSummary, func(l locks.Lock) any { return listToken{Prefix: prefix, Cursor: l.Cursor} })
	return connect.NewResponse(&v1.ListLocksResponse{Locks: msgs, NextPageToken: next}), nil
}

// page converts all, a page the router read, with conv, cut short to fit one
// answer; next continues after the last one kept (with token's value for it)
// when the router has more or the page was cut, and is empty otherwise.
func page[T any, M proto.Message](s *Service, all []T, more bool, conv func(T) M, token func(T) any) (msgs []M, next string) {
	for _, x := range all {
		msgs = append(msgs, conv(x))
	}
	if n := fit(s, msgs); n < len(msgs) {
		msgs, all, more = msgs[:n], all[:n], true
	}
	if more && len(all) > 0 {
		next = encodeToken(token(all[len(all)-1]))
	}
	return msgs, next
}

// fit returns how many of msgs, from the first (at least one), fit in one
// answer under the gateway's message size cap.
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

// kindOf is the wire's kind of a queue.
func kindOf(election bool) v1.LockKind {
	if election {
		return v1.LockKind_LOCK_KIND_ELECTION
	}
	return v1.LockKind_LOCK_KIND_LOCK
}

func lockSummary(l locks.Lock) *v1.LockSummary {
	out := &v1.LockSummary{Name: l.Name, Kind: kindOf(l.Election), Shard: l.Shard, Limit: int32(l.Limit()), Waiters: l.Waiters(), ShardBreaker: l.Breaker}
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
	id, err := s.reader(ctx, name) // an election is allowed by its own name
	if err != nil {
		return nil, err
	}
	info, err := s.router.DescribeQueue(ctx, id.Tenant, name, election)
	if err != nil {
		return nil, err
	}
	out := &v1.DescribeQueueResponse{Name: name, Kind: kindOf(election), Shard: info.Shard, Limit: int32(info.Limit()), Revision: info.Revision, ShardBreaker: info.Breaker, Waiters: info.Waiters()}
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

// reader starts a read of one name: the name checked, the caller admitted
// (admit) and allowed the name by its tenant's policy.
func (s *Service) reader(ctx context.Context, name string) (Identity, error) {
	if err := queue.ValidateName(name); err != nil {
		return Identity{}, fieldOf("name", err)
	}
	id, err := s.admit(ctx)
	if err != nil {
		return id, err
	}
	return id, s.allow(id, name)
}
