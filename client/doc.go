// Package client is the Go SDK for leasegate: named locks (leases) with
// fencing tokens, FIFO waiting, background renewal and a loss signal.
//
// A Client talks to one or more gateways; any gateway serves any call.
// Acquire waits in the name's queue and returns a *Lock; TryAcquire never
// waits. The SDK renews the lock's lease in the background until Release.
// A Session shares leases among many locks — one per shard, renewed
// together by one keepalive call — so that renewal costs one keepalive per
// client rather than one per lock. Each shard's lease, and so each session
// lock, is lost on its own: a shard that fails costs a session only the
// locks on that shard.
//
// The package imports only the generated API, connect and public libraries.
//
// # The loss signal and its guarantee
//
// Every lock has a conservative deadline on the client's Clock, reported
// by Lock.Expires:
//
//	deadline = S + TTL − margin
//
// S is the clock reading taken just before the SDK sent the latest request
// that a gateway answered with a confirmation of the lease: the Acquire or
// TryAcquire that granted it (its first attempt, when it was retried), a
// renewal, or — for a lock in a Session — the latest session call (open,
// extension or keepalive) that confirmed the session's lease on the lock's
// shard; a keepalive that could not reach that shard confirms nothing for
// it, whatever it confirmed for the other shards. TTL is the effective TTL
// in that answer, and the deadline is tighter still when the gateway says
// the lease is certain to live less long from the request's arrival
// (valid_for_ms). margin is WithSafetyMargin: TTL/100 + 100 ms by default,
// at most TTL/3.
//
// Lock.Context is cancelled, and Lock.Done closed, at the first of:
//
//   - a gateway answering a renewal with proof that the lock is gone or not
//     the caller's (LOCK_EXPIRED, LOCK_STOLEN, LOCK_RELEASED by another
//     handle of its lock id, SESSION_LOST, permission
//     denied; for a session lock, a keepalive reporting the session's lease
//     on the lock's shard gone): at once, with Err wrapping ErrLockLost and
//     that answer;
//   - the deadline, when no renewal confirmed the lease before it, because
//     gateways are unreachable, shutting down or cut off from etcd: at the
//     deadline, never later, with Err wrapping ErrLockLost and
//     ErrUnavailable. The SDK does not wait for a renewal still in flight,
//     and an answer that arrives after the deadline does not revive the lock;
//   - Release (Err is ErrReleased), or Close of the lock's session.
//
// A session lock is never lost because another shard of its session
// failed. Once the SDK has given a session's lease up (by proof or by
// deadline), it stops renewing it, so the locks on it lapse in etcd too,
// and a later lock on that shard gets a new lease: a lost lock is never
// revived.
//
// Why the deadline is safe: etcd counts a lease's TTL from when its leader
// handled the grant or keepalive that confirmed it. A gateway may answer a
// renewal with a keepalive that was already in flight, sent before the
// renewal arrived; it then says how long the lease is certain to live from
// the renewal's arrival (valid_for_ms), and the SDK takes the tighter of
// that and the TTL, both counted from S, which is before the arrival. A
// leader change only ever extends leases. So while this process's clock runs no slower
// than the etcd leader's, the lease outlives the deadline by at least the
// margin. The margin absorbs clock-rate drift and the delay between the
// cancel and your code noticing it. No client-side signal can stop a
// process that is paused (GC, SIGSTOP, VM migration) across its deadline
// from writing late; that is what fencing tokens are for: send Lock.Token
// with every write and have the resource refuse tokens older than the
// newest it has seen.
//
// Renewals are sent every TTL × WithRenewFraction (1/3 by default), ±10%
// jitter, counted from the send time of the previous confirmation. A
// failed renewal is retried on the next endpoint with backoff until the
// deadline, so with the defaults a lock survives a total gateway outage of
// about 2/3 TTL − margin. Timestamps that gateways report (HeldError,
// Description, Renewal) are on the gateway's clock; the loss signal never
// relies on them.
//
// # Errors
//
// Errors match the sentinels of this package with errors.Is (ErrLockLost,
// ErrWaitTimeout, ErrNotAcquired, …) and wrap the *connect.Error a gateway
// answered, whose leasegate reason Reason extracts as a value of the
// API's ErrorReason enum (leasegate.v1), the same values gateways send.
// Each sentinel is one thing a program can act on:
//
//   - ErrUnavailable: no gateway answered, or every one was down or cut
//     off from etcd. Retried on every endpoint, with backoff, first.
//   - ErrRateLimited (a *RateLimitError): a gateway's rate limit refused
//     the call. The SDK waits the delay the gateway gives (its RetryInfo)
//     on the client's Clock and asks the same gateway again — a unary call
//     within its usual attempts (at least 3), Acquire for as long as it
//     would wait anyway — and does not hop to another gateway, whose own
//     budget would only hide the tenant's overload. It returns at once
//     when the delay would end after the context's deadline or the
//     Acquire's wait timeout. Background renewals wait the delay too,
//     until the lock's deadline.
//   - ErrQuotaExceeded (a *QuotaError): a cap on keys or waiters refused
//     the call. Not retried: only the end of other locks or waits helps.
//   - ErrPermissionDenied: the tenant's name policy refuses the name.
//   - ErrNotOwner: a lock id, fencing token, request id or session id is
//     not the caller's.
//   - ErrUnauthenticated: the gateway refused the credentials (no or a
//     wrong token, a TLS certificate refused or not trusted). Not retried.
//   - ErrInternal: a gateway failed unexpectedly (internal, unknown,
//     data_loss or unimplemented from the gateway itself). Not retried;
//     the same failure connect reports for a connection broken mid-call is
//     ErrUnavailable.
//
// # Conveniences
//
// Client.Do and Session.Do run a function under a lock, with a context
// that ends when the lock is lost. NewLocker adapts a lock to
// sync.Locker. WithManualRenew turns the background renewal off, for
// callers that renew with Lock.Renew when their work needs more time.
package client
