//go:build linux

package chaos

import (
	"fmt"
	"time"

	"github.com/leasegate/leasegate/client"
)

// The checkers of evictions (nemesis_evict.go).
//
// A force-release deletes the holder's key at once, and the next waiter is
// granted — no loss wait: an administrator evicting a live holder means it
// — while the evicted holder still believes until it is told. The SDK
// tells it through the hold watch it opens once it has held a lock for
// client.DefaultHoldWatchAfter, at once; a lock held less long learns at
// its next renewal or when the watch opens, whichever comes first. So a
// holder evicted by its token must stop believing within its bound of the
// force-release's answer: evictionNoticeWatched once it had held longer
// than DefaultHoldWatchAfter, else its renewal interval (sdkRenewInterval)
// plus evictionNoticeSlack. An overlap whose earlier holder was evicted
// before the later grant is no violation when the evicted holder kept to
// its bound (belief), and a violation naming the bound when it did not;
// every evicted holder is held to it, whoever waited (evictedHolders).

// checkEvicted names the checker of evicted holders.
const checkEvicted = "evicted-holder-told"

// Eviction outcomes.
const (
	evictEvicted = "evicted" // the holder with the token was evicted
	evictFree    = "free"    // the name was free: nothing evicted
	evictRefused = "refused" // the token held no more (or the call was refused): nothing evicted
	evictUnknown = "unknown" // no answer: it may have evicted
)

// Bounds on an evicted holder's belief, from the force-release's answer.
const (
	evictionNoticeWatched = 1500 * time.Millisecond
	evictionNoticeSlack   = time.Second
)

// Eviction is one force-release by fencing token the nemesis sent.
type Eviction struct {
	// Name and Token name the holder asked to be evicted.
	Name  string `json:"name"`
	Token int64  `json:"token"`
	// Gateway is the gateway asked.
	Gateway string `json:"gateway"`
	// Outcome is evictEvicted, evictFree, evictRefused or evictUnknown.
	Outcome string `json:"outcome"`
	// Client is the evicted holder's client id, as the gateway answered.
	Client string `json:"client,omitempty"`
	// Err is the error of a call that evicted nothing, or whose outcome is
	// unknown.
	Err string `json:"err,omitempty"`
	// Invoke and Complete bound the call.
	Invoke   time.Time `json:"invoke"`
	Complete time.Time `json:"complete"`
}

// markEvicted marks, on every granted op of an evicted token (a lock's
// first grant, not its holds), when the earliest force-release that
// evicted it — or may have: no answer — was sent and answered.
func markEvicted(ops []AcquireOp, evs []Eviction) {
	type key struct {
		name  string
		token int64
	}
	first := map[key]Eviction{}
	for _, e := range evs {
		if e.Outcome != evictEvicted && e.Outcome != evictUnknown {
			continue
		}
		k := key{e.Name, e.Token}
		if f, ok := first[k]; !ok || e.Invoke.Before(f.Invoke) {
			first[k] = e
		}
	}
	for i := range ops {
		op := &ops[i]
		e, ok := first[key{op.Name, op.Token}]
		if !ok || op.Outcome != outGranted || op.HoldOf != nil {
			continue
		}
		op.EvictedAt, op.EvictionDone, op.EvictionUnsure = e.Invoke, e.Complete, e.Outcome == evictUnknown
	}
}

// sdkRenewInterval is the longest the SDK waits between two renewals of a
// lease of ttl: a third of it (client.WithRenewFraction's default),
// jittered by up to 10 %.
func sdkRenewInterval(ttl time.Duration) time.Duration { return ttl * 11 / 30 }

// evictionBound is how long after the force-release's answer an evicted
// op's holder may still believe.
func (op *AcquireOp) evictionBound() time.Duration {
	if op.EvictedAt.Sub(op.Complete) > client.DefaultHoldWatchAfter {
		return evictionNoticeWatched
	}
	return sdkRenewInterval(op.TTL) + evictionNoticeSlack
}

// evictionWhy says what the bound of an evicted op is, for reports.
func (op *AcquireOp) evictionWhy() string {
	held := op.EvictedAt.Sub(op.Complete).Round(time.Millisecond)
	if op.EvictedAt.Sub(op.Complete) > client.DefaultHoldWatchAfter {
		return fmt.Sprintf("held %s, past the SDK's hold watch delay %s: %s", held, client.DefaultHoldWatchAfter, evictionNoticeWatched)
	}
	return fmt.Sprintf("held %s, before its hold watch: its renewal interval %s + %s",
		held, sdkRenewInterval(op.TTL).Round(time.Millisecond), evictionNoticeSlack)
}

// toldInTime reports whether an evicted op's holder stopped believing
// within its bound.
func (op *AcquireOp) toldInTime() bool {
	to := op.believedUntil()
	return !to.IsZero() && !to.After(op.EvictionDone.Add(op.evictionBound()))
}

// evictionExcuses reports whether op's belief, overlapping a grant at t,
// is excused by op's eviction: it was evicted before t and stopped
// believing within its bound.
func (op *AcquireOp) evictionExcuses(t time.Time) bool {
	return !op.EvictedAt.IsZero() && !t.Before(op.EvictedAt) && op.toldInTime()
}

// evictedHolders: every holder evicted by its token while it believed
// stopped believing within its bound. An eviction whose answer was lost
// is not judged: it may have evicted nothing.
func evictedHolders(ops []AcquireOp) []Violation {
	var vs []Violation
	for _, op := range ops {
		if op.EvictedAt.IsZero() || op.EvictionUnsure || op.Role == "holder" {
			continue
		}
		to := op.believedUntil()
		switch {
		case !to.IsZero() && !to.After(op.EvictedAt):
			// It had let go before the eviction.
		case to.IsZero():
			vs = append(vs, Violation{Check: checkEvicted, Name: op.Name, Ops: []int{op.ID}, Detail: fmt.Sprintf(
				"op %d (%s, %s) was evicted by token %d at %s (answered %s) and never stopped believing (bound: %s)",
				op.ID, op.Client, op.Role, op.Token, ts(op.EvictedAt), ts(op.EvictionDone), op.evictionWhy())})
		case !op.toldInTime():
			vs = append(vs, Violation{Check: checkEvicted, Name: op.Name, Ops: []int{op.ID}, Detail: fmt.Sprintf(
				"op %d (%s, %s) was evicted by token %d at %s (answered %s) and believed until %s, %s after the answer, past its bound (%s)",
				op.ID, op.Client, op.Role, op.Token, ts(op.EvictedAt), ts(op.EvictionDone), ts(to),
				to.Sub(op.EvictionDone).Round(time.Millisecond), op.evictionWhy())})
		}
	}
	return vs
}

// EvictionCounts is what the evict injections did, and how soon the
// evicted holders knew.
type EvictionCounts struct {
	// Sent counts the force-releases by token; Evicted, Free, Refused and
	// Unknown them by outcome.
	Sent, Evicted, Free, Refused, Unknown int
	// Holders counts the evicted grants of the history that still believed
	// at the eviction; Told those the SDK ended (ToldEvicted of them with
	// ErrEvicted), ReleasedFirst those that let go before they were told.
	Holders, Told, ToldEvicted, ReleasedFirst int
	// Watched and Unwatched are the times from the force-release's send
	// to the end of the told holders' belief: held longer than
	// client.DefaultHoldWatchAfter, and less long.
	Watched, Unwatched durations
	// Violations counts the violations of checkEvicted.
	Violations int
}

// evictionFigures counts what evs did to ops (marked by markEvicted).
func evictionFigures(ops []AcquireOp, evs []Eviction, vs []Violation) EvictionCounts {
	var c EvictionCounts
	for _, e := range evs {
		c.Sent++
		switch e.Outcome {
		case evictEvicted:
			c.Evicted++
		case evictFree:
			c.Free++
		case evictRefused:
			c.Refused++
		default:
			c.Unknown++
		}
	}
	for _, op := range ops {
		to := op.believedUntil()
		if op.EvictedAt.IsZero() || op.EvictionUnsure || !to.IsZero() && !to.After(op.EvictedAt) {
			continue
		}
		c.Holders++
		if !op.Lost || op.DoneAt.IsZero() {
			c.ReleasedFirst++
			continue
		}
		c.Told++
		if op.ToldEvicted {
			c.ToldEvicted++
		}
		if d := op.DoneAt.Sub(op.EvictedAt); op.EvictedAt.Sub(op.Complete) > client.DefaultHoldWatchAfter {
			c.Watched = append(c.Watched, d)
		} else {
			c.Unwatched = append(c.Unwatched, d)
		}
	}
	for _, v := range vs {
		if v.Check == checkEvicted {
			c.Violations++
		}
	}
	return c
}
