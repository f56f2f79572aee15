//go:build linux

package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// Re-entrant holders in the run.
//
// Re-entrant workers (Config.ReentrantWorkers) take the workers' contended
// names in a session with client.WithReentrant and re-enter each lock once
// or twice through that session: every re-entry must be a hold of its
// own, with a lock id none of the lock's other holds has, the lock's
// fencing token, and a hold count one higher. Some holds are asked for
// again with their request id, as a client whose answer was lost does: the
// answer must be the same hold — its lock id and hold count — and a retry
// of the lock's own acquire its lock id. The holds are released in a
// random order, some of them twice at the wire (a raw Connect Release, on
// either gateway, then the same again): once the first was answered, the
// second must answer released=false.
//
// The worker believes it holds the lock from its first grant until it
// begins to release its last hold, or until one of its holds' Context ends
// otherwise (the lock lost or evicted). Its first acquire is recorded with
// that belief, and each re-entry granted the lock's token as a hold of it
// (AcquireOp.HoldOf), which the grant checkers leave to the first: so a
// hold dropped twice, freeing the name under a hold the worker still has,
// is an overlap with the other workers' grants (belief). A re-entry
// granted another token found the lock gone before it arrived: it is a
// lock of its own, judged as any grant, and released at once. The wire
// answers are HoldOps, judged by checkHolds.

// Hold op kinds.
const (
	holdTaken   = "re-entry"
	holdRetry   = "retry"
	holdRelease = "release-twice"
)

// HoldOp is what a re-entrant worker saw at the wire of one of its holds:
// a re-entry granted a hold, an acquire of a hold sent again with its
// request id, or a hold's release sent twice.
type HoldOp struct {
	// Kind is holdTaken, holdRetry or holdRelease.
	Kind string `json:"kind"`
	// Client and Name are the worker and the lock name.
	Client string `json:"client"`
	Name   string `json:"name"`
	// Op is the op of the lock's first grant; Token the lock's token.
	Op    int   `json:"op"`
	Token int64 `json:"token"`
	// Hold is a digest of the hold's lock id (holdDigest), and Count its
	// hold count as first answered. Own marks the lock's own hold (its
	// first acquire), whose retry is a takeover of the key: its hold count
	// is not judged.
	Hold  string `json:"hold"`
	Count int    `json:"count,omitempty"`
	Own   bool   `json:"own,omitempty"`
	// Others are, for a re-entry, the digests of the lock's other holds
	// (none released yet).
	Others []string `json:"others,omitempty"`
	// Again, AgainCount and AgainToken are, for a retry, the lock id
	// digest, hold count and token it was answered (empty and 0 when not
	// granted).
	Again      string `json:"again,omitempty"`
	AgainCount int    `json:"againCount,omitempty"`
	AgainToken int64  `json:"againToken,omitempty"`
	// Answered and Released are, for a release sent twice, the first
	// release's answer (Answered false: no gateway answered it); the
	// Again… fields the second's.
	Answered      bool `json:"answered,omitempty"`
	Released      bool `json:"released,omitempty"`
	AnsweredAgain bool `json:"answeredAgain,omitempty"`
	ReleasedAgain bool `json:"releasedAgain,omitempty"`
	// Err is the error of a call without an answer.
	Err string `json:"err,omitempty"`
	// Invoke and Complete bound the calls.
	Invoke   time.Time `json:"invoke"`
	Complete time.Time `json:"complete"`
}

// holdDigest names a lock id in the history without its secret.
func holdDigest(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:6])
}

// runReentrants adds the re-entrant workers to wg; they run until ctx ends.
func (h *Harness) runReentrants(ctx context.Context, wg *sync.WaitGroup, seed uint64) error {
	for i := range h.cfg.ReentrantWorkers {
		who := fmt.Sprintf("r%d", i)
		s, err := h.newSDK(who, nil)
		if err != nil {
			return err
		}
		rng := mrand.New(mrand.NewPCG(seed, 300+uint64(i)))
		wg.Go(func() { h.runReentrant(ctx, s, who, rng) })
	}
	return nil
}

// runReentrant takes a contended name re-entrant in its session, re-enters
// it, holds, releases every hold, and again, until ctx ends. Its session
// is opened again when lost, and closed when a release was not confirmed
// (the close frees what is left).
func (h *Harness) runReentrant(ctx context.Context, s *sdk, who string, rng *mrand.Rand) {
	var sess *client.Session
	closeSess := func() {
		if sess != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = sess.Close(cctx)
			cancel()
			sess = nil
		}
	}
	defer closeSess()
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	for ctx.Err() == nil {
		if sess == nil || sess.Err() != nil {
			closeSess()
			var err error
			if sess, err = s.base.OpenSession(ctx, client.WithTTL(h.cfg.TTL)); err != nil {
				sess = nil
				pause(100 * time.Millisecond)
				continue
			}
		}
		name := h.names[rng.IntN(len(h.names))]
		wait := time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
		l, op := h.acquireWith(ctx, s, acquireSpec{who: who, role: "reentrant", name: name, wait: wait, session: sess, reentrant: true})
		if l == nil {
			var reason string
			h.Hist.update(func() { reason = op.Reason })
			if reason == client.ReasonSessionLost.String() {
				closeSess()
			}
			pause(50 * time.Millisecond)
			continue
		}
		rl := &reentrantLock{h: h, s: s, who: who, sess: sess, op: op, token: l.Token(), lostc: make(chan struct{})}
		rl.take(l, op, nil)
		if !rl.run(ctx, rng) {
			closeSess()
		}
	}
}

// reentrantLock is a lock a re-entrant worker holds through its session,
// and every hold it took of it.
type reentrantLock struct {
	h     *Harness
	s     *sdk
	who   string
	sess  *client.Session
	op    *AcquireOp // the first grant, whose belief is the worker's
	token int64

	mu    sync.Mutex
	holds []*heldHold
	lost  *client.Lock  // the first Lock whose Context ended otherwise than by its hold's release
	lostc chan struct{} // closed when lost is set
}

// heldHold is one hold: the Locks the SDK answered for it (more than one
// when its acquire was sent again).
type heldHold struct {
	rid       string
	own       bool           // the lock's own hold
	locks     []*client.Lock // with the ops that were granted them
	ops       []*AcquireOp
	releasing bool
}

// letGo marks hd released from now: its ops end (the first grant's belief
// is set apart, by its caller).
func (rl *reentrantLock) letGo(hd *heldHold) {
	now := time.Now()
	rl.mu.Lock()
	hd.releasing = true
	rl.mu.Unlock()
	rl.h.Hist.update(func() {
		for _, op := range hd.ops {
			if op != rl.op && op.End.IsZero() {
				op.End = now
			}
		}
	})
}

// take makes l, granted by op, a hold of the lock: hd's again, or a new
// one when hd is nil. A grant of another token is a lock of its own (the
// lock was gone before the re-entry arrived): it is followed and released
// at once, and take returns nil.
func (rl *reentrantLock) take(l *client.Lock, op *AcquireOp, hd *heldHold) *heldHold {
	if l == nil {
		return nil
	}
	if l.Token() != rl.token {
		rl.h.followBelief(l, op)
		rl.h.release(l, op)
		return nil
	}
	if op != rl.op {
		// A hold of the lock (the lock's own again, for a retry of its
		// first acquire): its belief is the first op's.
		id := rl.op.ID
		rl.h.Hist.update(func() { op.HoldOf = &id })
	}
	rl.mu.Lock()
	if hd == nil {
		hd = &heldHold{rid: l.RequestID(), own: op == rl.op}
		rl.holds = append(rl.holds, hd)
	}
	hd.locks, hd.ops = append(hd.locks, l), append(hd.ops, op)
	rl.mu.Unlock()
	context.AfterFunc(l.Context(), func() {
		now := time.Now()
		rl.mu.Lock()
		first := !hd.releasing && rl.lost == nil
		if first {
			rl.lost = l
			close(rl.lostc)
		}
		rl.mu.Unlock()
		if first {
			rl.h.Hist.update(func() {
				if rl.op.DoneAt.IsZero() {
					rl.op.DoneAt = now
				}
			})
		}
	})
	return hd
}

// lostLock is the Lock whose end ended the worker's belief, or nil.
func (rl *reentrantLock) lostLock() *client.Lock {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.lost
}

// run re-enters the lock once or twice, holding in between, and releases
// every hold. It reports false when a release was not confirmed.
func (rl *reentrantLock) run(ctx context.Context, rng *mrand.Rand) bool {
	for range 1 + rng.IntN(2) {
		if !rl.hold(ctx, rng) {
			break
		}
		rl.reenter(ctx, rng)
	}
	rl.hold(ctx, rng)
	return rl.releaseAll(ctx, rng)
}

// hold writes the lock's token to the register, as a holder that checks
// its lock first, and keeps the lock a while: mostly 20 to 200 ms, at
// times 0.6 to 1.2 s, so that the holds' watches (opened after
// client.DefaultHoldWatchAfter) are open when an eviction comes. It
// reports false when the lock is lost or ctx ended.
func (rl *reentrantLock) hold(ctx context.Context, rng *mrand.Rand) bool {
	if rl.lostLock() != nil || ctx.Err() != nil {
		return false
	}
	_, _, _ = rl.h.Reg.Write(ctx, rl.who, rl.op.Name, rl.token)
	d := time.Duration(20+rng.IntN(180)) * time.Millisecond
	if rng.IntN(4) == 0 {
		d = time.Duration(600+rng.IntN(600)) * time.Millisecond
	}
	select {
	case <-ctx.Done():
		return false
	case <-rl.lostc:
		return false
	case <-time.After(d):
		return true
	}
}

// reenter takes one more hold and, at times, sends a hold's acquire again
// with its request id (the new hold's, or the lock's own).
func (rl *reentrantLock) reenter(ctx context.Context, rng *mrand.Rand) {
	l, op := rl.h.acquireWith(ctx, rl.s, acquireSpec{who: rl.who, role: "re-entry", name: rl.op.Name, wait: time.Second, session: rl.sess, reentrant: true})
	var others []string
	rl.mu.Lock()
	for _, o := range rl.holds {
		others = append(others, holdDigest(o.locks[0].ID()))
	}
	rl.mu.Unlock()
	hd := rl.take(l, op, nil)
	if hd == nil {
		return
	}
	var got AcquireOp
	rl.h.Hist.update(func() { got = *op })
	rl.h.Hist.addHold(HoldOp{Kind: holdTaken, Client: rl.who, Name: rl.op.Name, Op: rl.op.ID, Token: rl.token, Hold: holdDigest(l.ID()),
		Count: l.HoldCount(), Others: others, Invoke: got.Invoke, Complete: got.Complete})
	if rng.IntN(2) == 0 {
		return
	}
	if rng.IntN(3) == 0 {
		rl.mu.Lock()
		hd = rl.holds[0]
		rl.mu.Unlock()
	}
	rl.retry(ctx, hd)
}

// retry sends hd's acquire again with its request id and records what
// came back beside the first answer.
func (rl *reentrantLock) retry(ctx context.Context, hd *heldHold) {
	h := rl.h
	rl.mu.Lock()
	first := hd.locks[0]
	rl.mu.Unlock()
	l, op := h.acquireWith(ctx, rl.s, acquireSpec{who: rl.who, role: "re-entry", name: rl.op.Name, wait: time.Second, requestID: hd.rid, session: rl.sess, reentrant: true})
	var got AcquireOp
	h.Hist.update(func() { got = *op })
	ho := HoldOp{Kind: holdRetry, Client: rl.who, Name: rl.op.Name, Op: rl.op.ID, Token: rl.token, Hold: holdDigest(first.ID()),
		Count: first.HoldCount(), Own: hd.own, Invoke: got.Invoke, Complete: got.Complete}
	if l == nil {
		ho.Err = got.Err
	} else {
		ho.Again, ho.AgainCount, ho.AgainToken = holdDigest(l.ID()), l.HoldCount(), l.Token()
	}
	h.Hist.addHold(ho)
	rl.take(l, op, hd)
}

// releaseAll releases every hold in a random order — a third of them
// twice at the wire first — or, once the lock is lost, records the loss
// and lets every Lock go. The worker's belief ends as the last hold's
// release begins. It reports false when a release was not confirmed.
func (rl *reentrantLock) releaseAll(ctx context.Context, rng *mrand.Rand) bool {
	h := rl.h
	rl.mu.Lock()
	holds := append([]*heldHold(nil), rl.holds...)
	rl.mu.Unlock()
	ok := true
	var released []*client.Lock
	for k, i := range rng.Perm(len(holds)) {
		hd := holds[i]
		if lost := rl.lostLock(); lost != nil {
			rl.abandon(lost, holds)
			return ok
		}
		last := k == len(holds)-1
		now := time.Now()
		rl.letGo(hd)
		if last {
			h.Hist.update(func() { rl.op.End = now })
		}
		if rng.IntN(3) == 0 {
			rl.releaseTwice(ctx, hd, rng)
		}
		for _, l := range hd.locks {
			if err := releaseLock(l); err != nil {
				ok = false
			}
			released = append(released, l)
		}
		if !ok {
			// The session's close frees what is left; the worker stops
			// believing as it gives up.
			h.Hist.update(func() {
				if rl.op.End.IsZero() {
					rl.op.End = time.Now()
				}
			})
			return false
		}
	}
	for _, l := range released {
		h.stale.addLock(staleLock{id: l.ID(), token: l.Token(), name: l.Name(), shard: l.Shard(), client: rl.who})
	}
	return ok
}

// abandon records the loss of the lock (lost is the Lock that ended
// first) and lets every hold's Locks go.
func (rl *reentrantLock) abandon(lost *client.Lock, holds []*heldHold) {
	for _, hd := range holds {
		rl.letGo(hd)
	}
	rl.h.lost(lost, rl.op)
	for _, hd := range holds {
		for _, l := range hd.locks {
			_ = releaseLock(l)
		}
	}
}

// releaseLock releases l, trying up to three times.
func releaseLock(l *client.Lock) error {
	var err error
	for range 3 {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = l.Release(rctx)
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

// releaseTwice releases hd at the wire, on a gateway picked at random, and
// then again on one picked at random, recording both answers.
func (rl *reentrantLock) releaseTwice(ctx context.Context, hd *heldHold, rng *mrand.Rand) {
	h := rl.h
	l := hd.locks[0]
	ho := HoldOp{Kind: holdRelease, Client: rl.who, Name: rl.op.Name, Op: rl.op.ID, Token: rl.token, Hold: holdDigest(l.ID()),
		Count: l.HoldCount(), Own: hd.own, Invoke: time.Now()}
	release := func() (answered, released bool, err error) {
		g := h.Gateways[rng.IntN(len(h.Gateways))]
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		resp, err := rl.s.raw(g.Front.URL()).Release(rctx, connect.NewRequest(&v1.ReleaseRequest{LockId: l.ID(), FencingToken: l.Token()}))
		if err != nil {
			return false, false, err
		}
		return true, resp.Msg.Released, nil
	}
	var err1, err2 error
	ho.Answered, ho.Released, err1 = release()
	ho.AnsweredAgain, ho.ReleasedAgain, err2 = release()
	ho.Complete = time.Now()
	switch {
	case err1 != nil:
		ho.Err = "first: " + err1.Error()
	case err2 != nil:
		ho.Err = "again: " + err2.Error()
	}
	h.Hist.addHold(ho)
}
