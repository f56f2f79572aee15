//go:build linux

package chaos

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/leasegate/leasegate/queue"
)

// Acquire outcomes.
const (
	outGranted  = "granted"
	outTimeout  = "wait-timeout"
	outCanceled = "canceled"
	outHeld     = "held" // a TryAcquire that found the lock taken
	outLost     = "lost" // granted, but lost before the call returned
	outError    = "error"
)

// AcquireOp is one Acquire call and, when granted, the life of its lock as
// the SDK saw it.
type AcquireOp struct {
	// ID numbers the op in the history.
	ID int `json:"id"`
	// Client is the caller: w3, probe, holder-1234, nemesis …
	Client string `json:"client"`
	// Role is worker, probe, holder or nemesis.
	Role string `json:"role"`
	// Name is the lock name.
	Name string `json:"name"`
	// Limit is the semaphore limit the acquire asked for: 1 for a lock
	// (begin records 1 where the caller gave none).
	Limit int `json:"limit"`
	// RequestID is the idempotency key; its waiter id names the etcd key.
	RequestID string `json:"requestId"`
	// GrantedUnder is the request id of the grant when the SDK made it
	// under another (a session that replaced its lease on the shard while
	// the call waited retries under a fresh id); empty otherwise.
	GrantedUnder string `json:"grantedUnder,omitempty"`
	// Wait is the wait timeout asked for.
	Wait time.Duration `json:"wait"`
	// Invoke and Complete bound the call; Queued is when the gateway first
	// reported the caller enqueued (zero when granted at once).
	Invoke   time.Time `json:"invoke"`
	Queued   time.Time `json:"queued,omitzero"`
	Complete time.Time `json:"complete,omitzero"`
	// LastQueued is the latest queue-position report (a retry on another
	// gateway reports again).
	LastQueued time.Time `json:"lastQueued,omitzero"`
	// Attempts are the op's Acquire RPCs; empty for holders in another
	// process.
	Attempts []Attempt `json:"attempts,omitempty"`
	// Outcome is granted, wait-timeout, held (a TryAcquire that found the
	// lock taken), lost (granted, but the SDK could not confirm the lease
	// and found it gone before returning), canceled or error.
	Outcome string `json:"outcome"`
	// Err is the error text when not granted.
	Err string `json:"err,omitempty"`
	// Token and Shard describe the grant.
	Token int64  `json:"token,omitempty"`
	Shard string `json:"shard,omitempty"`
	// Code and Reason are the Connect code and the gateway's reason
	// (client.Reason) of a failed acquire, when a gateway answered.
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	// End is when the holder let go: the release's invoke, or when it
	// noticed the loss. Zero while held or when unknown (a holder process
	// paused past its TTL).
	End time.Time `json:"end,omitzero"`
	// DoneAt is when the holder stopped believing it held the lock as it
	// happened, not as the holder noticed: when the SDK lock's Context was
	// done, when a raw client's deadline passed or a gateway refused its
	// renewal, when the last process of a leasectl holder's command
	// exited.
	DoneAt time.Time `json:"doneAt,omitzero"`
	// Lost reports that the lock was lost rather than released; LostProof
	// that a gateway proved it gone (expired, stolen, not the owner)
	// rather than the holder's deadline passing unconfirmed.
	Lost      bool `json:"lost,omitempty"`
	LostProof bool `json:"lostProof,omitempty"`
	// Deadline is the holder's own conservative deadline when it lost the
	// lock.
	Deadline time.Time `json:"deadline,omitzero"`
	// Victim is, for a thief, the op whose request id it reused.
	Victim *int `json:"victim,omitempty"`
	// TTL is the lease TTL the grant rides on: the acquire's, or its
	// session's; zero when unknown.
	TTL time.Duration `json:"ttl,omitempty"`
	// HoldOf is, for a re-entry granted a hold of a lock its session held
	// (reentrant.go), the op of that lock's first grant: the hold is that
	// grant's, and so is the belief.
	HoldOf *int `json:"holdOf,omitempty"`
	// LostErr is what the lock's Err said when its holder noticed the
	// loss; ToldEvicted reports that it was ErrEvicted.
	LostErr     string `json:"lostErr,omitempty"`
	ToldEvicted bool   `json:"toldEvicted,omitempty"`
	// EvictedAt is when a force-release of this grant's token was sent
	// (nemesis_evict.go), and EvictionDone when it answered; zero when
	// never evicted. EvictionUnsure marks one whose answer was lost, which
	// may have evicted nothing. The checks set them from
	// History.Evictions (markEvicted).
	EvictedAt      time.Time `json:"-"`
	EvictionDone   time.Time `json:"-"`
	EvictionUnsure bool      `json:"-"`
}

// grantWaiter is the waiter id of the key a grant was made from.
func (op *AcquireOp) grantWaiter() string {
	if op.GrantedUnder != "" {
		return queue.WaiterID(op.GrantedUnder)
	}
	return queue.WaiterID(op.RequestID)
}

// limit is the op's semaphore limit, 1 when unrecorded.
func (op *AcquireOp) limit() int { return max(op.Limit, 1) }

// believedUntil is when the holder stopped believing it held the lock:
// the earlier of End and DoneAt; zero when neither is known.
func (op *AcquireOp) believedUntil() time.Time {
	switch {
	case op.End.IsZero():
		return op.DoneAt
	case op.DoneAt.IsZero() || op.End.Before(op.DoneAt):
		return op.End
	}
	return op.DoneAt
}

// RegisterOp is one operation on the fenced register.
type RegisterOp struct {
	// Client is the caller.
	Client string `json:"client"`
	// Name is the register's key: the lock name.
	Name string `json:"name"`
	// Write is true for a write, false for a read.
	Write bool `json:"write"`
	// Token is the write's fencing token.
	Token int64 `json:"token,omitempty"`
	// OK reports an accepted write.
	OK bool `json:"ok"`
	// Highest is the highest accepted token: read's result, or the reason
	// of a refused write.
	Highest int64 `json:"highest"`
	// Invoke and Complete bound the operation.
	Invoke   time.Time `json:"invoke"`
	Complete time.Time `json:"complete"`
}

// Injection is one fault, from injection to recovery.
type Injection struct {
	// Kind is the fault kind.
	Kind string `json:"kind"`
	// Target names what was hit.
	Target string `json:"target"`
	// Clusters are the clusters whose names the fault affects; empty means
	// all.
	Clusters []string `json:"clusters,omitempty"`
	// Start is when the fault began; Heal when it was undone; End when the
	// system was healthy again.
	Start time.Time `json:"start"`
	Heal  time.Time `json:"heal,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// Unavailable is the time from Start to the first grant invoked after
	// Start on an affected name; -1 when none came before the next fault.
	Unavailable time.Duration `json:"unavailable"`
	// Freed is, for a crashed holder, the time from the crash to the next
	// grant of its name.
	Freed time.Duration `json:"freed,omitempty"`
	// Note says what was observed.
	Note string `json:"note,omitempty"`
	// Violation is set when the injection's own check failed.
	Violation string `json:"violation,omitempty"`
	// StaleRevokes is, for a leader-pause, the last moment after the
	// member resumed at which its log shows a lease revoke of its own
	// timing out ("failed to revoke lease": its lessor still acting as the
	// primary; etcd re-sends the revoke, which can still land until then);
	// zero when it logged none. See knownPausedLeaderRevokes.
	StaleRevokes time.Time `json:"staleRevokes,omitzero"`
}

// History is everything a run records. It is safe for concurrent use.
type History struct {
	mu         sync.Mutex
	Acquires   []*AcquireOp  `json:"acquires"`
	Register   []RegisterOp  `json:"register"`
	Injections []*Injection  `json:"injections"`
	Adversary  []AdversaryOp `json:"adversary"`
	Holds      []HoldOp      `json:"holds"`
	Evictions  []Eviction    `json:"evictions"`
	Keys       []KeyEvent    `json:"keys"`
	Clock      []ClockSample `json:"clock"`
}

// begin records an Acquire call being invoked.
func (h *History) begin(op *AcquireOp) *AcquireOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.Acquires)
	op.Limit = op.limit()
	h.Acquires = append(h.Acquires, op)
	return op
}

// update runs fn on an op under the history's lock.
func (h *History) update(fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn()
}

func (h *History) addRegister(op RegisterOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Register = append(h.Register, op)
}

func (h *History) addAdversary(op AdversaryOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Adversary = append(h.Adversary, op)
}

func (h *History) addHold(op HoldOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Holds = append(h.Holds, op)
}

func (h *History) addEviction(e Eviction) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Evictions = append(h.Evictions, e)
}

func (h *History) addInjection(in *Injection) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Injections = append(h.Injections, in)
}

// snapshotAcquires copies the acquire ops.
func (h *History) snapshotAcquires() []AcquireOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]AcquireOp, len(h.Acquires))
	for i, op := range h.Acquires {
		out[i] = *op
	}
	return out
}

// save writes the history as JSON to dir/history.json.
func (h *History) save(dir string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
}
