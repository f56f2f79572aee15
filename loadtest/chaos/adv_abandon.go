//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/leasegate/leasegate/client"
)

// runAbandoner is a session worker that gives its acquires up at random
// moments: each call's context ends soon after the call began (within
// 300 ms on the contended names, within 40 ms on quiet names of its own),
// so the wait, the enqueue, the grant and the grant's answer all race it —
// under every injection, with lost answers among them. Its acquires are
// recorded like the workers' (the grant checkers judge what it is handed),
// and a lock it is handed it holds briefly and releases.
//
// A call that ends by its context must leave nothing of the session
// behind: a session's grant would hold its name as long as the session
// lives, and the SDK gives up in the background what the gateway made
// under the call's request id. So once the workload stops, the abandoner
// waits (for at most abandonSettle) until no name it abandoned has a
// holder of its own, and records the outcome as an adversary call: any
// such holder left is a violation, named with its token.
func (h *Harness) runAbandoner(ctx context.Context, s *sdk, who string, rng *mrand.Rand) {
	var sess *client.Session
	abandoned := map[string]bool{}
	var unreleased []*client.Lock // released only at the end: their release was not confirmed
	defer func() {
		h.checkAbandoned(s, who, abandoned, unreleased)
		if sess != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = sess.Close(cctx)
			cancel()
		}
	}()
	for ctx.Err() == nil {
		if sess == nil || sess.Err() != nil {
			var err error
			if sess, err = s.base.OpenSession(ctx, client.WithTTL(h.cfg.TTL)); err != nil {
				sess = nil
				h.advPause(ctx, rng)
				continue
			}
		}
		// Half the calls wait on the contended names and end while
		// waiting or as they are granted; half take a quiet name of the
		// abandoner's own and end within the time a grant takes to come
		// back, racing its answer.
		name, within := h.names[rng.IntN(len(h.names))], 300*time.Millisecond
		if rng.IntN(2) == 0 {
			name, within = fmt.Sprintf("abandoned-%d", rng.IntN(4)), 40*time.Millisecond
		}
		actx, cancel := context.WithTimeout(ctx, time.Duration(rng.Int64N(int64(within)))+time.Millisecond)
		l, op := h.acquireWith(actx, s, acquireSpec{who: who, role: "abandoner", name: name, session: sess, wait: 3 * time.Second})
		cancel()
		if l == nil {
			if ctx.Err() == nil {
				abandoned[name] = true
			}
			h.advPause(ctx, rng)
			continue
		}
		if !h.letGo(l, op) {
			unreleased = append(unreleased, l)
		}
	}
}

// abandonSettle bounds how long the abandoner waits, once the workload
// stops, for the SDK to give up what its abandoned calls left.
const abandonSettle = 15 * time.Second

// checkAbandoned records whether any name in abandoned is still held by
// the abandoner's session once the gateways answer (see runAbandoner).
func (h *Harness) checkAbandoned(s *sdk, who string, abandoned map[string]bool, unreleased []*client.Lock) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), abandonSettle)
	defer cancel()
	var kept []int64 // tokens of locks handed out, whose release was not confirmed
	for _, l := range unreleased {
		if err := l.Release(ctx); err != nil {
			kept = append(kept, l.Token())
		}
	}
	names := make([]string, 0, len(abandoned))
	for n := range abandoned {
		names = append(names, n)
	}
	slices.Sort(names)
	// The verdict is the last round of reads that ended before the bound.
	var left []string
	lastErr := errors.New("no round of reads ended within " + abandonSettle.String())
	for {
		var round []string
		var roundErr error
		for _, n := range names {
			q, err := s.base.DescribeQueue(ctx, n)
			if err != nil {
				roundErr = err
				continue
			}
			for _, e := range q.Entries {
				if e.Holder && e.ClientID == who && !slices.Contains(kept, e.Token) {
					round = append(round, fmt.Sprintf("%s token %d", n, e.Token))
				}
			}
		}
		if ctx.Err() != nil {
			break
		}
		left, lastErr = round, roundErr
		if len(left) == 0 && lastErr == nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
		if ctx.Err() != nil {
			break
		}
	}
	op := AdversaryOp{Adversary: "abandoner", Action: fmt.Sprintf("%d abandoned names left unheld by its session", len(names)),
		Expect: "no holder of its session", Invoke: began}
	switch {
	case len(left) > 0:
		op.Outcome, op.Got, op.Detail = advAccepted, "held", "still held after "+abandonSettle.String()+": "+strings.Join(left, ", ")
	case lastErr != nil:
		op.Outcome, op.Got, op.Detail = advTransient, "no answer", lastErr.Error()
	default:
		op.Outcome, op.Got = advNoop, "none held"
	}
	h.record(op)
}
