//go:build linux

package chaos

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"connectrpc.com/connect"
)

// runThief acquires with the request ids of other clients' acquires while
// they wait or hold, under a client id of its own. A request id resumes
// only its own caller's waiter: the thief must be refused with
// permission_denied, and must never be granted the waiter it named. When
// the victim's key is already gone, the thief gets a waiter of its own
// like anyone with a new request id; the grant checkers judge it like any
// other (checkThieves looks at whose key it was).
func (h *Harness) runThief(ctx context.Context, s *sdk, rng *mrand.Rand) {
	const who = "adv-thief"
	used := map[string]bool{}
	for ctx.Err() == nil {
		h.advPause(ctx, rng)
		v, state, ok := h.pickVictim(rng, used)
		if !ok {
			continue
		}
		used[v.RequestID] = true
		try := rng.IntN(2) == 0
		action := "acquire with another client's request id"
		if try {
			action = "try-acquire with another client's request id"
		}
		l, op := h.acquireWith(ctx, s, acquireSpec{who: who, role: "thief", name: v.Name, requestID: v.RequestID, try: try,
			wait: 300*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond)))})
		vid := v.ID
		var got AcquireOp
		h.Hist.update(func() {
			op.Victim = &vid
			got = *op
		})
		aop := AdversaryOp{Adversary: "thief", Action: action, Name: v.Name, Expect: codes(connect.CodePermissionDenied),
			Invoke: got.Invoke, Complete: got.Complete, Detail: fmt.Sprintf("the request id of %s's op %d, %s", v.Client, v.ID, state)}
		switch {
		case l != nil:
			aop.Got, aop.Outcome = fmt.Sprintf("granted token %d", got.Token), advFresh
		case got.Outcome == outTimeout || got.Outcome == outHeld || got.Outcome == outLost:
			// A waiter of its own, so the victim's was gone: it waited
			// in vain, found the name taken, or was granted and lost the
			// lock before the call returned (a slow call's lease lapses).
			aop.Got, aop.Outcome = got.Outcome, advFresh
		case got.Code == connect.CodePermissionDenied.String():
			aop.Got, aop.Outcome = got.Code, advRefused
		case got.Code == "" || got.Code == connect.CodeUnavailable.String() || got.Code == connect.CodeDeadlineExceeded.String() ||
			got.Code == connect.CodeCanceled.String() || got.Code == connect.CodeResourceExhausted.String() || got.Code == connect.CodeUnknown.String():
			aop.Got, aop.Outcome = got.Code, advTransient
		default:
			aop.Got, aop.Outcome = got.Code, advWrongCode
		}
		h.record(aop)
		if l != nil {
			h.hold(ctx, l, op, who, 1, 20*time.Millisecond)
		}
	}
}

// pickVictim picks a recent acquire of another client that is enqueued and
// waiting, or holding, whose request id the thief has not used: a
// re-entrant worker's too, whose holds are named by their request ids
// (reentrant.go) and whose waiters belong to its session.
func (h *Harness) pickVictim(rng *mrand.Rand, used map[string]bool) (AcquireOp, string, bool) {
	var cands []AcquireOp
	var states []string
	h.Hist.update(func() {
		for i := len(h.Hist.Acquires) - 1; i >= 0 && i >= len(h.Hist.Acquires)-300; i-- {
			op := h.Hist.Acquires[i]
			switch op.Role {
			case "worker", "stable", "tamper", "reentrant", "re-entry":
			default:
				continue
			}
			if used[op.RequestID] {
				continue
			}
			switch {
			case op.Outcome == "" && !op.Queued.IsZero():
				cands, states = append(cands, *op), append(states, "waiting")
			case op.Outcome == outGranted && op.End.IsZero() && op.DoneAt.IsZero():
				cands, states = append(cands, *op), append(states, "holding")
			}
		}
	})
	if len(cands) == 0 {
		return AcquireOp{}, "", false
	}
	i := rng.IntN(len(cands))
	return cands[i], states[i], true
}
