package queue

import "errors"

// Errors returned by the engine. Callers match them with errors.Is; the
// gateway maps each to one wire code.
var (
	// ErrInvalidName reports a lock name outside the allowed form.
	ErrInvalidName = errors.New("invalid lock name")
	// ErrInvalidTTL reports a TTL outside the configured range.
	ErrInvalidTTL = errors.New("invalid ttl")
	// ErrInvalidArgument reports another malformed request field.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotAcquired reports that TryAcquire found the lock held.
	ErrNotAcquired = errors.New("lock is held by another owner")
	// ErrWaitTimeout reports that the caller's wait timeout passed before
	// a grant: the cause a caller ends a wait's context with (Wait returns
	// it). The waiter's key has been removed.
	ErrWaitTimeout = errors.New("wait timed out")
	// ErrLeaseLost reports that the waiter's or holder's lease expired or
	// was revoked; its key is gone and it will never be granted.
	ErrLeaseLost = errors.New("lease lost")
	// ErrExpired reports a renew or check of a lock whose key is gone while
	// nobody holds the name.
	ErrExpired = errors.New("lock expired")
	// ErrStolen reports a renew or check of a lock whose key is gone while
	// another waiter now holds the name.
	ErrStolen = errors.New("lock is held by a newer holder")
	// ErrReleased reports a renew of a lock whose holder released it (or
	// closed its session): the release's mark proves it (handoff.go). It is
	// neither ErrExpired nor ErrStolen: the lock did not lapse, it was let
	// go.
	ErrReleased = errors.New("lock released")
	// ErrEvicted reports a renew of a lock an administrator force-released
	// (force.go): its holder must stop, as for a lost lock.
	ErrEvicted = errors.New("lock evicted")
	// ErrNotOwner reports a secret or fencing token that does not match the
	// lock it names.
	ErrNotOwner = errors.New("not the lock's owner")
	// ErrGuardFailed reports that a caller-supplied enqueue guard did not
	// hold (the shard router uses guards to fence enqueues by epoch).
	ErrGuardFailed = errors.New("enqueue guard failed")
	// ErrSessionLost reports a session whose lease expired, was closed, or
	// whose secret does not match.
	ErrSessionLost = errors.New("session lost")
	// ErrDetached is the cancel cause a caller gives a wait's context to end
	// the wait while keeping the waiter's key: the lease keeps it until its
	// TTL, so a retry with the same request id elsewhere resumes the place.
	ErrDetached = errors.New("wait detached")
	// ErrSuperseded reports an attempt whose waiter was taken over by a
	// retry with the same request id (on this or another gateway): the
	// retry now serves the caller, and this attempt leaves the key alone.
	ErrSuperseded = errors.New("superseded by a retry")
	// ErrCallerGone reports a wait ended because its caller no longer
	// proved it was there to receive an answer (AcquireRequest.Heartbeat).
	ErrCallerGone = errors.New("caller gone")
	// ErrQueueFull reports a name whose queue is at its configured cap.
	ErrQueueFull = errors.New("queue full")
	// ErrLimitMismatch reports an acquire whose semaphore limit is not the
	// one its name is held or waited for with: a name's limit is fixed
	// while it has keys.
	ErrLimitMismatch = errors.New("limit does not match the name's")
	// ErrHolderChanged reports a force-release whose holder was not the
	// one it meant to evict: another token, or gone before the delete.
	ErrHolderChanged = errors.New("holder changed")
	// ErrCompacted reports a watch whose start revision etcd has
	// compacted away: the caller must start over from a snapshot.
	ErrCompacted = errors.New("watch history compacted")
	// ErrWatchBudget reports a watch whose prefix covers more keys than
	// the engine's watches may follow together (Config.MaxWatchKeys).
	ErrWatchBudget = errors.New("watch budget exhausted")
	// ErrClosed reports use of an engine after Close.
	ErrClosed = errors.New("engine closed")
	// ErrNoLeader reports an election that nobody leads.
	ErrNoLeader = errors.New("no leader")
	// ErrNotLeader reports a Proclaim by a caller whose term has ended; it
	// comes joined with ErrExpired (nobody leads) or ErrStolen (another
	// campaigner leads).
	ErrNotLeader = errors.New("not the leader")
	// ErrTooManyHolds reports a re-entrant acquire of a lock that already
	// has MaxHolds holds.
	ErrTooManyHolds = errors.New("too many holds")
)

// FieldError is a request the engine refused for the value of one of its
// fields. Field is the field's name in the engine's request (AcquireRequest:
// "Name", "TTL", "ClientID", "RequestID", "Epoch", "Limit", "LockDelay",
// "Reentrant", "Value"; OpenSession: "ClientID", "TTL"; Proclaim: "Value"),
// for a caller to name it in its own vocabulary. Err says what was wrong
// and what is allowed, and wraps ErrInvalidName, ErrInvalidTTL or
// ErrInvalidArgument.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// fieldErr tags err, if any, with the request field it concerns.
func fieldErr(field string, err error) error {
	if err == nil {
		return nil
	}
	return &FieldError{Field: field, Err: err}
}
