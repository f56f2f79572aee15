//go:build linux

package chaos

import (
	"fmt"
	"slices"
	"strings"
)

// The checkers of re-entered locks' holds (reentrant.go). What a worker
// believed is judged by belief, over its first grant; what the wire
// answered about each hold is judged here.

// Checker names of the holds.
const (
	checkHoldIdentity = "hold-own-identity"
	checkHoldRetry    = "reentry-retry-same-hold"
	checkHoldRelease  = "hold-released-once"
)

// checkHolds: a re-entry granted the lock's token is a hold of its own —
// a lock id none of the lock's other holds has — and the lock then has
// one hold more than before. An acquire of a hold sent again with its request id and
// granted the lock's token is that hold — its lock id, and for a re-entry
// its hold count (a retry of the lock's own acquire takes its key over,
// whose count is not judged); a retry granted another token found the lock
// gone, and is a lock of its own that the grant checkers judge. A hold's
// release sent again after the first was answered answers released=false:
// the hold went with the first, and a second release that drops anything
// dropped another hold.
func checkHolds(ops []HoldOp) []Violation {
	var vs []Violation
	for _, o := range ops {
		switch o.Kind {
		case holdTaken:
			if slices.Contains(o.Others, o.Hold) || o.Count != len(o.Others)+1 {
				vs = append(vs, Violation{Check: checkHoldIdentity, Name: o.Name, Ops: []int{o.Op}, Detail: fmt.Sprintf(
					"%s re-entered token %d (op %d) at %s, holding %d holds (%s): answered hold %s with hold count %d, not a hold of its own with count %d",
					o.Client, o.Token, o.Op, ts(o.Invoke), len(o.Others), strings.Join(o.Others, ", "), o.Hold, o.Count, len(o.Others)+1)})
			}
		case holdRetry:
			if o.AgainToken != o.Token {
				continue
			}
			if o.Again != o.Hold || !o.Own && o.AgainCount != o.Count {
				vs = append(vs, Violation{Check: checkHoldRetry, Name: o.Name, Ops: []int{o.Op}, Detail: fmt.Sprintf(
					"%s re-entered token %d (op %d) and, at %s, sent the acquire of its hold %s (hold count %d) again with its request id: answered hold %s with hold count %d, not the same hold",
					o.Client, o.Token, o.Op, ts(o.Invoke), o.Hold, o.Count, o.Again, o.AgainCount)})
			}
		case holdRelease:
			if o.Answered && o.AnsweredAgain && o.ReleasedAgain {
				vs = append(vs, Violation{Check: checkHoldRelease, Name: o.Name, Ops: []int{o.Op}, Detail: fmt.Sprintf(
					"%s released hold %s of token %d (op %d) at %s (answered released=%v) and sent the same release again: answered released=true, a second hold dropped",
					o.Client, o.Hold, o.Token, o.Op, ts(o.Invoke), o.Released)})
			}
		}
	}
	return vs
}

// HoldCounts is what the re-entrant workers did.
type HoldCounts struct {
	// Locks counts the locks they were granted, and Holds the re-entries
	// granted a hold of them.
	Locks, Holds int
	// Fresh counts re-entries granted another token: the lock was gone.
	Fresh int
	// Retried counts acquires of a hold sent again; RetriedSame those
	// answered the same hold.
	Retried, RetriedSame int
	// Twice counts holds released twice at the wire with both answered;
	// FirstGone those whose first release already found the hold gone
	// (the lock lost), and SecondReleased those whose second release
	// answered released=true (violations).
	Twice, FirstGone, SecondReleased int
	// Violations counts the violations of the holds' checks.
	Violations int
}

// holdFigures counts, from ops and holds, what the re-entrant workers did.
func holdFigures(ops []AcquireOp, holds []HoldOp, vs []Violation) HoldCounts {
	var c HoldCounts
	for _, op := range ops {
		if op.Outcome != outGranted {
			continue
		}
		switch {
		case op.Role == "reentrant":
			c.Locks++
		case op.Role == "re-entry" && op.HoldOf != nil:
			c.Holds++
		case op.Role == "re-entry":
			c.Fresh++
		}
	}
	for _, o := range holds {
		switch o.Kind {
		case holdRetry:
			if o.AgainToken == o.Token {
				c.Retried++
				if o.Again == o.Hold && (o.Own || o.AgainCount == o.Count) {
					c.RetriedSame++
				}
			}
		case holdRelease:
			if o.Answered && o.AnsweredAgain {
				c.Twice++
				if !o.Released {
					c.FirstGone++
				}
				if o.ReleasedAgain {
					c.SecondReleased++
				}
			}
		}
	}
	for _, v := range vs {
		if v.Check == checkHoldIdentity || v.Check == checkHoldRetry || v.Check == checkHoldRelease {
			c.Violations++
		}
	}
	return c
}
