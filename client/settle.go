package client

import (
	"context"
	"sync"
	"time"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// Settling an abandoned session acquire.
//
// An attempt whose answer never reached the caller — the caller's context
// ended while the gateway answered, or the connection broke after the
// gateway sent the grant and no retry followed before the wait deadline —
// may have been granted. A lock of its own lapses at its TTL, unrenewed;
// a session's grant rides on the session's lease and would live as long
// as the session: a holder nobody serves. So a session call that ends
// without a Lock after such an attempt settles its request id: in the
// background, it asks with the same id for the grant made under it while it
// holds (a TryAcquire with existing_only: it writes nothing, so an ask that
// arrives late changes nothing) and releases what it is handed. A key still
// waiting is the gateway's to remove: the stream's end removes it, or the
// attempt lease it rides on lapses. It retries transient failures until a
// gateway answers or the session ends.
//
// Claims and settlements are kept by the gateway's waiter: kind (lock or
// election), name and request id. A waiter that a held Lock of the session
// was granted under (a retry of a delivered hold's acquire) is never
// settled: that grant is the Lock's. A later call of the session on a
// waiter being settled takes the settlement over: it stops it — cutting
// short an ask in flight (a read), but never a release, which is retried until a
// gateway answers (a copy that lands later finds the key gone, or another
// incarnation of it) — and asks under the id itself, as a retry, keeping
// whatever the lost attempt had (its queue place, its grant); or, when the
// settlement released that grant, under a fresh id (takeOver). Should it
// end without a lock in its turn, it settles with the lost call's ask.
//
// settleKey is the waiter's key in claims and settlements.
func settleKey(election bool, name, rid string) string {
	kind := "lock"
	if election {
		kind = "election"
	}
	return kind + "\x00" + name + "\x00" + rid
}

// settleState is a session's record of request ids: which its held Locks
// were granted under, and which are being settled.
type settleState struct {
	mu       sync.Mutex
	claims   map[string]int         // request id → held Locks granted under it
	settling map[string]*settlement // request id → its settlement
}

// settlement is the give-up of one request id, run by settleNow.
type settlement struct {
	done     chan struct{} // closed when it ends
	handover bool          // a call asks to take it over
	stopAsk  func()        // cuts the ask in flight short; nil between asks
	ended    bool          // done is closed
	released bool          // it released the grant it was handed
	again    settleAgain
}

// settleAgain asks once more for the grant of request id rid on ep, in
// session sessionID; it returns the grant, nil when there is none.
type settleAgain func(ctx context.Context, ep endpoint, sessionID string) (*v1.Granted, error)

// claim records l, a Lock of s granted under rid, until it is released
// or lost.
func (s *Session) claim(l *Lock, rid string) {
	st := &s.settle
	st.mu.Lock()
	if st.claims == nil {
		st.claims = make(map[string]int)
	}
	st.claims[rid]++
	st.mu.Unlock()
	context.AfterFunc(l.ctx, func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.claims[rid]--; st.claims[rid] <= 0 {
			delete(st.claims, rid)
		}
	})
}

// takeOver takes over the settlement of request id rid, if one runs: it
// stops it and waits until it has, for at most until (zero: no bound) or
// ctx. It reports whether it took one over; the caller then owes rid's
// settlement if it ends without a lock. A wait cut short leaves the
// settlement running, unless it ended meanwhile.
//
// released reports a settlement that released the grant it was handed.
// The request id is then spent: a copy of that release may still land,
// and a hold granted again under the id on the same lock — a re-entered
// hold, or the key's own hold of a lock other holds keep — has the
// released hold's lock id, which the copy would drop. Nothing is left to
// retry under it, so the caller asks under a fresh id.
func (s *Session) takeOver(ctx context.Context, until time.Time, rid string) (took bool, prev settleAgain, released bool, err error) {
	st := &s.settle
	st.mu.Lock()
	m := st.settling[rid]
	if m == nil {
		st.mu.Unlock()
		return false, nil, false, nil
	}
	prev = m.again
	m.handover = true
	if m.stopAsk != nil {
		m.stopAsk()
	}
	st.mu.Unlock()
	var bound <-chan time.Time
	if !until.IsZero() {
		t := s.c.cfg.clock.NewTimer(max(until.Sub(s.c.cfg.clock.Now()), 0))
		defer t.Stop()
		bound = t.C()
	}
	select {
	case <-m.done: // ended: m.ended is set
	case <-ctx.Done():
		err = ctx.Err()
	case <-bound:
		err = ErrWaitTimeout
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if m.ended {
		return true, prev, m.released, err
	}
	m.handover = false
	return false, nil, false, err
}

// sessionCall is one acquire's or campaign's part in its session's
// settlements: the ask of a settlement it took over, and its last
// attempt in doubt. A nil sessionCall (no session) does nothing.
type sessionCall struct {
	s        *Session
	election bool
	name     string
	prev     settleAgain // the ask of the settlement this call took over
	doubtRID string      // the request id of the last attempt in doubt; "" when none
	ask      settleAgain // that attempt's ask
}

// beginCall takes over the settlement of request id *rid, if one runs
// (takeOver), waiting until until at most (zero: no bound). Taken over,
// the settlement is the call's own attempt in doubt, asked with ask();
// when the settlement had released its grant, *rid is spent and replaced
// by a fresh id.
func (s *Session) beginCall(ctx context.Context, until time.Time, election bool, name string, rid *string, ask func() settleAgain) (*sessionCall, error) {
	sc := &sessionCall{s: s, election: election, name: name}
	took, prev, released, err := s.takeOver(ctx, until, settleKey(election, name, *rid))
	sc.prev = prev
	if took {
		sc.doubt(*rid, ask())
	}
	if released {
		// A copy of that release may still land (takeOver): nothing is
		// left to retry under the id.
		*rid, sc.prev = newRequestID(), nil
		sc.clear()
	}
	return sc, err
}

// doubt records an attempt under request id rid whose outcome is in
// doubt (inDoubt), settled with ask should the call end without a Lock.
func (sc *sessionCall) doubt(rid string, ask settleAgain) {
	if sc != nil {
		sc.doubtRID, sc.ask = rid, ask
	}
}

// clear forgets the attempt in doubt: what it left died with its lease.
func (sc *sessionCall) clear() {
	if sc != nil {
		sc.doubtRID, sc.ask = "", nil
	}
}

// end closes the call: a Lock it returns is claimed under its request id;
// without one, the attempt in doubt is settled — with the ask of the
// settlement the call took over while it is still that request id's (rid,
// the call's id at its end), with its own ask otherwise.
func (sc *sessionCall) end(l *Lock, rid string) {
	switch {
	case sc == nil:
	case l != nil:
		sc.s.claim(l, settleKey(sc.election, sc.name, l.rid))
	case sc.doubtRID == "":
	case sc.prev != nil && sc.doubtRID == rid:
		sc.s.settleLater(settleKey(sc.election, sc.name, sc.doubtRID), sc.prev)
	default:
		sc.s.settleLater(settleKey(sc.election, sc.name, sc.doubtRID), sc.ask)
	}
}

// settleLater settles request id rid in the background (see above) with
// again, unless a held Lock of the session was granted under it.
func (s *Session) settleLater(rid string, again settleAgain) {
	st := &s.settle
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.claims[rid] > 0 || st.settling[rid] != nil || s.ctx.Err() != nil {
		return
	}
	if st.settling == nil {
		st.settling = make(map[string]*settlement)
	}
	m := &settlement{done: make(chan struct{}), again: again}
	st.settling[rid] = m
	go func() {
		s.settleNow(rid, m, again)
		st.mu.Lock()
		defer st.mu.Unlock()
		s.endSettlement(rid, m)
	}()
}

// endSettlement ends m, the settlement of rid; st.mu is held.
func (s *Session) endSettlement(rid string, m *settlement) {
	if m.stopAsk != nil {
		m.stopAsk()
		m.stopAsk = nil
	}
	if !m.ended {
		m.ended = true
		delete(s.settle.settling, rid)
		close(m.done)
	}
}

// nextAsk returns the context of m's next ask, or false when m is to end:
// a call took it over (rid's settlement then ends here, under the lock, so
// the call can rely on it), or the session ended.
func (s *Session) nextAsk(rid string, m *settlement) (context.Context, bool) {
	st := &s.settle
	st.mu.Lock()
	defer st.mu.Unlock()
	if m.handover || s.ctx.Err() != nil {
		s.endSettlement(rid, m)
		return nil, false
	}
	if m.stopAsk != nil {
		m.stopAsk() // the last ask's context
	}
	ctx, cancel := context.WithCancel(s.ctx)
	m.stopAsk = cancel
	return ctx, true
}

// settleNow asks again until a gateway answers and releases the grant it
// is handed; it ends with the session, or when a call takes it over.
func (s *Session) settleNow(rid string, m *settlement, again settleAgain) {
	c, clk := s.c, s.c.cfg.clock
	bo := c.newBackoff()
	for {
		ctx, ok := s.nextAsk(rid, m)
		if !ok {
			return
		}
		i, ep := c.pick()
		actx, cancel := withTimeout(ctx, clk, c.cfg.requestTimeout+waitGrace)
		g, err := again(actx, ep, s.current().id)
		cancel()
		if err == nil && g == nil {
			return
		}
		if err == nil {
			// Not cut short by a takeover: the call taking over waits
			// for it, so it cannot land after that call's grant.
			for {
				rctx, cancel := withTimeout(s.ctx, clk, c.cfg.requestTimeout)
				_, err = c.ReleaseByID(rctx, g.LockId, g.FencingToken)
				cancel()
				if err == nil || !retryable(err) && rateLimited(err) == nil || s.ctx.Err() != nil {
					break
				}
				_ = sleep(s.ctx, clk, bo.next())
			}
			s.settle.mu.Lock()
			m.released = true
			s.settle.mu.Unlock()
			return
		}
		if !retryable(err) && rateLimited(err) == nil && ctx.Err() == nil {
			return // a gateway answered that nothing is left to release
		}
		if ctx.Err() == nil {
			c.failed(i)
		}
		_ = sleep(ctx, clk, bo.next())
	}
}

// inDoubt reports whether an attempt that failed with err may have been
// granted all the same: its answer was lost on the way, so no gateway
// told the caller what became of it. A refusal the gateway sent, with its
// reason, is an answer.
func inDoubt(err error) bool {
	return Reason(err) == v1.ErrorReason_ERROR_REASON_UNSPECIFIED
}
