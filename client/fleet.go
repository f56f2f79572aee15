package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Kinds of queue: a lock's (or a semaphore's) and an election's.
const (
	KindLock     = "lock"
	KindElection = "election"
)

// queueKind is the SDK's name of a wire kind.
func queueKind(k v1.LockKind) string {
	if k == v1.LockKind_LOCK_KIND_ELECTION {
		return KindElection
	}
	return KindLock
}

// LockSummary is one lock (or election) as ListLocks reports it.
type LockSummary struct {
	// Name is the lock name, or the election name.
	Name string
	// Kind is KindLock or KindElection.
	Kind string
	// Shard is the etcd cluster the lock lives on.
	Shard string
	// Limit is how many holders the name admits at once: 1 for a lock,
	// N for a semaphore of limit N.
	Limit int
	// Holders are the current holders (at most Limit).
	Holders []LockHolder
	// Waiters counts the waiters behind the holders.
	Waiters int64
	// ShardBreaker is the gateway's breaker state for the shard: "closed",
	// "open" or "half-open".
	ShardBreaker string
}

// LockHolder is one holder of a lock.
type LockHolder struct {
	// ClientID is the holder's client id.
	ClientID string
	// Token is its fencing token.
	Token int64
	// Expires is when its lease lapses unless renewed (gateway's clock).
	Expires time.Time
	// Since is when it enqueued (see the API's LockHolder.since).
	Since time.Time
	// Session is true for a lock in a session.
	Session bool
	// TTL is the lease TTL.
	TTL time.Duration
}

// LockPage is one page of ListLocks.
type LockPage struct {
	// Locks in key order.
	Locks []LockSummary
	// NextPageToken continues the walk; empty on the last page.
	NextPageToken string
}

// ListLocks reads one page of the tenant's locks whose names begin with
// prefix, across every shard. pageSize 0 means the gateway's default
// (100); pageToken is the previous page's NextPageToken, or empty.
func (c *Client) ListLocks(ctx context.Context, prefix string, pageSize int, pageToken string) (LockPage, error) {
	m, _, err := unary(ctx, c, fmt.Sprintf("list locks %q", prefix), &v1.ListLocksRequest{Prefix: prefix, PageSize: int32(pageSize), PageToken: pageToken},
		leasegatev1connect.LockServiceClient.ListLocks)
	if err != nil {
		return LockPage{}, err
	}
	out := LockPage{NextPageToken: m.NextPageToken}
	for _, l := range m.Locks {
		s := LockSummary{Name: l.Name, Kind: queueKind(l.Kind), Shard: l.Shard, Limit: int(l.Limit), Waiters: l.Waiters, ShardBreaker: l.ShardBreaker}
		for _, h := range l.Holders {
			s.Holders = append(s.Holders, LockHolder{
				ClientID: h.ClientId, Token: h.FencingToken, Expires: timeOf(h.ExpiresAt), Since: timeOf(h.Since), Session: h.Session, TTL: ms(h.TtlMs),
			})
		}
		out.Locks = append(out.Locks, s)
	}
	return out, nil
}

func timeOf(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// QueueEntry is one key of a lock's queue: a holder or a waiter.
type QueueEntry struct {
	// ClientID is the entry's client id.
	ClientID string
	// Position is its place in line, as its own Acquire stream reports
	// it: 0 for every holder, 1 for the waiter granted next.
	Position int64
	// WaitingSince is when it enqueued.
	WaitingSince time.Time
	// Session is true for a lock in a session.
	Session bool
	// Holder is true for the holder.
	Holder bool
	// Token is the holder's fencing token (0 for waiters).
	Token int64
	// Expires is the holder's lease expiry (zero for waiters).
	Expires time.Time
	// TTL is the lease TTL.
	TTL time.Duration
}

// Queue is a lock's (or an election's) queue as DescribeQueue reports it.
type Queue struct {
	// Name is the lock name, or the election name.
	Name string
	// Kind is KindLock or KindElection.
	Kind string
	// Shard is the etcd cluster the lock lives on.
	Shard string
	// Limit is how many holders the name admits at once.
	Limit int
	// Entries are holders then waiters, in FIFO order; a long queue is
	// cut short to fit one answer (Waiters counts them all).
	Entries []QueueEntry
	// Waiters counts every waiter behind the holders.
	Waiters int64
	// Revision is the shard's etcd revision the queue was read at.
	Revision int64
	// ShardBreaker is the gateway's breaker state for the shard.
	ShardBreaker string
}

// DescribeQueue reads lock name's holders and waiters in queue order.
func (c *Client) DescribeQueue(ctx context.Context, name string) (Queue, error) {
	return c.describeQueue(ctx, name, v1.LockKind_LOCK_KIND_LOCK)
}

// Queue reads the election's leader and campaigners in queue order: the
// leader is the holder.
func (e *Election) Queue(ctx context.Context) (Queue, error) {
	return e.c.describeQueue(ctx, e.name, v1.LockKind_LOCK_KIND_ELECTION)
}

func (c *Client) describeQueue(ctx context.Context, name string, kind v1.LockKind) (Queue, error) {
	m, _, err := unary(ctx, c, fmt.Sprintf("describe %s queue %q", queueKind(kind), name), &v1.DescribeQueueRequest{Name: name, Kind: kind},
		leasegatev1connect.LockServiceClient.DescribeQueue)
	if err != nil {
		return Queue{}, err
	}
	out := Queue{Name: m.Name, Kind: queueKind(m.Kind), Shard: m.Shard, Limit: int(m.Limit), Revision: m.Revision, ShardBreaker: m.ShardBreaker, Waiters: m.Waiters}
	for _, e := range m.Entries {
		out.Entries = append(out.Entries, QueueEntry{
			ClientID: e.ClientId, Position: e.Position, WaitingSince: timeOf(e.WaitingSince), Session: e.Session,
			Holder: e.Holder, Token: e.FencingToken, Expires: timeOf(e.ExpiresAt), TTL: ms(e.TtlMs),
		})
	}
	return out, nil
}

// WatchMessage is one message of a Watch stream.
type WatchMessage struct {
	// Kind is "snapshot", "snapshot_end", "events", "resync" or
	// "progress" (see the API's WatchMessageKind).
	Kind string
	// Events are snapshot entries or changes.
	Events []LockEvent
	// Shards a snapshot, snapshot_end or resync message is about.
	Shards []string
	// ResumeToken continues the stream right after this message.
	ResumeToken string
}

// LockEvent is one change of one lock, or one snapshot entry.
type LockEvent struct {
	// Type is "held", "queued", "released", "expired", "force_released"
	// or "left".
	Type string
	// Name is the lock name, or the election name.
	Name string
	// Kind is KindLock or KindElection.
	Kind string
	// Shard is the etcd cluster the lock lives on.
	Shard string
	// ClientID is the key's client id.
	ClientID string
	// Token is the holder's fencing token (0 for queued and left).
	Token int64
	// Position is the key's place in line at the event, numbered as
	// QueueEntry.Position: 0 for a holder.
	Position int64
	// Session is true for a lock in a session.
	Session bool
	// Revision is the etcd revision of the change on its shard.
	Revision int64
	// Enqueued is when the key enqueued.
	Enqueued time.Time
}

// Watch streams the tenant's lock events under prefix to fn, starting
// after resumeToken (empty: with a snapshot), until ctx ends (it then
// returns ctx's error), fn fails (its error), or the gateways refuse the
// watch for good. A stream that breaks is resumed, on the next gateway
// and after a backoff, from the last message fn accepted: fn sees no
// event twice and misses none, except as RESYNC messages announce.
func (c *Client) Watch(ctx context.Context, prefix, resumeToken string, fn func(WatchMessage) error) error {
	op := fmt.Sprintf("watch %q", prefix)
	return follow(ctx, c, func(ctx context.Context, ep endpoint) (*connect.ServerStreamForClient[v1.WatchResponse], error) {
		return ep.rpc.Watch(ctx, connect.NewRequest(&v1.WatchRequest{Prefix: prefix, ResumeToken: resumeToken}))
	}, func(msg *v1.WatchResponse) error {
		m := WatchMessage{
			Kind:   strings.ToLower(strings.TrimPrefix(msg.Kind.String(), "WATCH_MESSAGE_KIND_")),
			Shards: msg.Shards, ResumeToken: msg.ResumeToken,
		}
		for _, e := range msg.Events {
			m.Events = append(m.Events, LockEvent{
				Type: strings.ToLower(strings.TrimPrefix(e.Type.String(), "LOCK_EVENT_TYPE_")),
				Name: e.Name, Kind: queueKind(e.Kind), Shard: e.Shard, ClientID: e.ClientId, Token: e.FencingToken, Position: e.Position,
				Session: e.Session, Revision: e.Revision, Enqueued: timeOf(e.EnqueuedAt),
			})
		}
		if err := fn(m); err != nil {
			return err
		}
		resumeToken = m.ResumeToken
		return nil
	}, func(err error) error {
		if err != nil && !retryable(err) {
			return wrap(op, err)
		}
		return nil
	})
}

// AuditRecord is one administrative action.
type AuditRecord struct {
	// ID orders records by time within a shard.
	ID string
	// Action is "force_release".
	Action string
	// Name is the lock acted on.
	Name string
	// Shard holds the lock and the record.
	Shard string
	// Actor is who acted.
	Actor string
	// Reason is why.
	Reason string
	// At is when, on the gateway's clock.
	At time.Time
	// EvictedToken is the evicted holder's fencing token.
	EvictedToken int64
	// EvictedClientID is the evicted holder's client id.
	EvictedClientID string
}

// Eviction is what ForceRelease did.
type Eviction struct {
	// Released is false when the name was free.
	Released bool
	// EvictedToken and EvictedClientID name the evicted holder.
	EvictedToken    int64
	EvictedClientID string
	// Shard is the etcd cluster the lock lives on.
	Shard string
	// Audit is the record written with the eviction (nil when nothing
	// was evicted).
	Audit *AuditRecord
}

// ForceRelease evicts name's holder (admin role), recording reason. With
// token non-zero only the holder with that fencing token is evicted
// (otherwise it fails: the API's FAILED_PRECONDITION), and
// a failed attempt is retried on another gateway; with token 0 whoever
// holds the name is evicted, and the call is tried once, since a retry
// after an unknown outcome could evict the next holder.
func (c *Client) ForceRelease(ctx context.Context, name, reason string, token int64) (Eviction, error) {
	var out Eviction
	fn := func(ctx context.Context, rpc leasegatev1connect.LockServiceClient) error {
		r, err := c.endpointOf(rpc).admin.ForceRelease(ctx, connect.NewRequest(&v1.ForceReleaseRequest{Name: name, Reason: reason, FencingToken: token}))
		if err != nil {
			return err
		}
		m := r.Msg
		out = Eviction{Released: m.Released, EvictedToken: m.EvictedFencingToken, EvictedClientID: m.EvictedClientId, Shard: m.Shard}
		if m.Audit != nil {
			a := auditRecord(m.Audit)
			out.Audit = &a
		}
		return nil
	}
	op := fmt.Sprintf("force release %q", name)
	var err error
	if token == 0 {
		err = wrap(op, c.attempt(ctx, c.cfg.requestTimeout, fn))
	} else {
		err = c.call(ctx, op, fn)
	}
	return out, err // fn sets out: read it after the call
}

// AuditPage is one page of ListAudit.
type AuditPage struct {
	// Records, newest first.
	Records []AuditRecord
	// NextPageToken continues with older records; empty on the last page.
	NextPageToken string
}

// ListAudit reads one page of the tenant's audit records, newest first
// (admin role).
func (c *Client) ListAudit(ctx context.Context, pageSize int, pageToken string) (AuditPage, error) {
	m, _, err := unary(ctx, c, "list audit", &v1.ListAuditRequest{PageSize: int32(pageSize), PageToken: pageToken}, leasegatev1connect.AdminServiceClient.ListAudit)
	if err != nil {
		return AuditPage{}, err
	}
	out := AuditPage{NextPageToken: m.NextPageToken}
	for _, a := range m.Records {
		out.Records = append(out.Records, auditRecord(a))
	}
	return out, nil
}

func auditRecord(a *v1.AuditRecord) AuditRecord {
	return AuditRecord{
		ID: a.Id, Action: a.Action, Name: a.Name, Shard: a.Shard, Actor: a.Actor, Reason: a.Reason,
		At: timeOf(a.At), EvictedToken: a.EvictedFencingToken, EvictedClientID: a.EvictedClientId,
	}
}

// Description is a lock name's state as a gateway reports it.
type Description struct {
	// Name is the lock's name.
	Name string
	// Held reports whether someone holds the lock.
	Held bool
	// HolderClientID is the holder's self-reported identity.
	HolderClientID string
	// HolderExpires is when the holder's lease lapses unless renewed, on
	// the gateway's clock.
	HolderExpires time.Time
	// Token is the holder's fencing token; 0 when free.
	Token int64
	// Waiters is the number of waiters behind the holder.
	Waiters int64
	// TTL is the holder's lease TTL.
	TTL time.Duration
	// Shard names the etcd cluster the name lives on.
	Shard string
	// Limit is the name's semaphore limit: 1 for a lock, 0 when free.
	Limit int
	// DelayUntil, when set, is when a pending lock-delay ends at the
	// latest: a holder that asked for one expired, and nobody is granted
	// the name before it (WithLockDelay).
	DelayUntil time.Time
	// Holders lists every holder, oldest first: one for a lock, up to
	// Limit for a semaphore. The Holder… fields and Token describe the
	// first.
	Holders []Holder
}

// Holder is one holder of a name.
type Holder struct {
	// ClientID is the holder's self-reported identity.
	ClientID string
	// Expires is when its lease lapses unless renewed, on the gateway's
	// clock.
	Expires time.Time
	// Token is its fencing token.
	Token int64
	// TTL is its lease TTL.
	TTL time.Duration
}

// Describe reports a name's holder and queue. It blocks for the call,
// retried on other endpoints on transient failures.
func (c *Client) Describe(ctx context.Context, name string) (Description, error) {
	op := fmt.Sprintf("describe %q", name)
	m, _, err := unary(ctx, c, op, &v1.DescribeRequest{Name: name}, leasegatev1connect.LockServiceClient.Describe)
	if err != nil {
		return Description{}, err
	}
	d := Description{
		Name: m.Name, Held: m.Held, HolderClientID: m.HolderClientId, HolderExpires: timeOf(m.HolderExpiresAt), Token: m.FencingToken,
		Waiters: m.Waiters, TTL: ms(m.TtlMs), Shard: m.Shard, Limit: int(m.Limit), DelayUntil: timeOf(m.DelayUntil),
	}
	for _, h := range m.Holders {
		d.Holders = append(d.Holders, Holder{ClientID: h.ClientId, Expires: h.ExpiresAt.AsTime(), Token: h.FencingToken, TTL: ms(h.TtlMs)})
	}
	return d, nil
}

// Renewal is a gateway's answer to RenewByID.
type Renewal struct {
	// Expires is the lease's conservative expiry on the gateway's clock.
	Expires time.Time
	// TTL is the lease's effective TTL.
	TTL time.Duration
	// Deadline is conservative on this client's clock: the send time of
	// the renewal that was answered plus the tighter of TTL and what the
	// gateway said the lease owes from the request's arrival, less the
	// safety margin. Unlike Expires it needs no clock agreement.
	Deadline time.Time
}

// RenewByID renews a lock known only by its id and token, such as one
// acquired by another process (leasectl acquire). Locks from Acquire renew
// themselves; this is for the rest. It blocks for the call, retried on
// other endpoints on transient failures, and fails with an error wrapping
// ErrLockLost when the lock expired or was taken over.
func (c *Client) RenewByID(ctx context.Context, lockID string, token int64) (Renewal, error) {
	r, sent, err := unary(ctx, c, "renew", &v1.RenewRequest{LockId: lockID, FencingToken: token}, leasegatev1connect.LockServiceClient.Renew)
	if err != nil {
		return Renewal{}, err
	}
	ttl := ms(r.TtlMs)
	return Renewal{TTL: ttl, Expires: timeOf(r.ExpiresAt), Deadline: c.deadline(sent, confirmation{ttl: ttl, valid: ms(r.ValidForMs)})}, nil
}

// ReleaseByID frees a lock known only by its id and token. It is
// idempotent: released is false, with no error, when the lock was already
// gone, and it never frees a newer holder's lock. It blocks for the call,
// retried on other endpoints on transient failures.
func (c *Client) ReleaseByID(ctx context.Context, lockID string, token int64) (released bool, err error) {
	r, _, err := unary(ctx, c, "release", &v1.ReleaseRequest{LockId: lockID, FencingToken: token}, leasegatev1connect.LockServiceClient.Release)
	return r.GetReleased(), err
}
