//go:build linux

package chaos

import (
	"context"
	"encoding/base64"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

// The adversaries are clients that lie, replay and race, running beside the
// workers for the whole run. Each call one of them makes that the product
// must refuse, or treat as a no-op, is recorded as an AdversaryOp with what
// would be correct and what came back:
//
//   - tamper (adv_ids.go) holds locks of its own and renews and releases
//     them with edited ids and foreign tokens, over Connect and REST;
//   - replay (adv_ids.go) renews and releases with the ids of other
//     clients' locks after etcd has deleted their keys;
//   - session (adv_ids.go) keeps a session of its own and keeps alive,
//     closes and acquires with edited and closed session ids;
//   - thief (adv_thief.go) acquires with the request ids of other clients'
//     acquires in flight;
//   - the stable workers (adv_stable.go) use one request id each for every
//     acquire and acquire again at once after each release;
//   - resume (adv_resume.go) aborts its queued Acquire stream on one
//     gateway and resumes it with the same request id on the other.
//
// Whatever they get is judged twice: each call by its own expectation
// (adversaryViolations), and everything granted by the grant checkers, which see
// the adversaries' grants like any other.

// AdversaryOp is one call of an adversary.
type AdversaryOp struct {
	// Adversary names the client: tamper, replay, session, thief.
	Adversary string `json:"adversary"`
	// Action says what it tried.
	Action string `json:"action"`
	// Name is the lock name concerned, if any.
	Name string `json:"name,omitempty"`
	// Expect is what would be correct.
	Expect string `json:"expect"`
	// Got is what came back: a Connect code, an HTTP status, ok, released.
	Got string `json:"got"`
	// Outcome is advRefused, advNoop, advFresh, advIntact, advTransient,
	// advEvicted, advAccepted or advWrongCode.
	Outcome string `json:"outcome"`
	// Invoke and Complete bound the call.
	Invoke   time.Time `json:"invoke"`
	Complete time.Time `json:"complete"`
	// Detail says more: how the id was edited, whose id it was.
	Detail string `json:"detail,omitempty"`
	// Shard and Reason, for a genuine renewal after a tampered call: the
	// lock's shard and the reason a refusal gave (the end the gateway
	// proved: released, stolen, …).
	Shard  string `json:"shard,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Adversary outcomes.
const (
	// advRefused: refused as expected.
	advRefused = "refused"
	// advNoop: accepted as the no-op it must be (a stale release).
	advNoop = "no-op"
	// advFresh: a thief whose victim's key was already gone got a waiter of
	// its own, as anyone with a new request id would; the grant checkers
	// judge whatever it was granted.
	advFresh = "fresh"
	// advIntact: a genuine renewal or keepalive right after a wrong
	// release or close found the lock or session still there.
	advIntact = "intact"
	// advTransient: a gateway or etcd failure hid the answer.
	advTransient = "transient"
	// advEvicted: the evict injection force-released the adversary's lock
	// meanwhile, which hid the answer.
	advEvicted = "evicted"
	// advAccepted: the call took effect. A violation.
	advAccepted = "accepted"
	// advWrongCode: refused, but not as the API documents. A violation.
	advWrongCode = "wrong-code"
)

// codes renders Connect codes for AdversaryOp.Expect.
func codes(cs ...connect.Code) string {
	out := ""
	for i, c := range cs {
		if i > 0 {
			out += "|"
		}
		out += c.String()
	}
	return out
}

// classify judges a failed call: refused with one of want, transient, or
// refused with the wrong code. got is the code's name. Only what a gateway
// answered is judged: an error the client made up itself (a connection
// cut by the fault proxy mid-answer reads as internal) is transient.
func classify(err error, want ...connect.Code) (got, outcome string) {
	code := connect.CodeOf(err)
	if !connect.IsWireError(err) {
		return "no answer (" + code.String() + ")", advTransient
	}
	for _, w := range want {
		if code == w {
			return code.String(), advRefused
		}
	}
	switch code {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled,
		connect.CodeResourceExhausted, connect.CodeUnknown:
		return code.String(), advTransient
	}
	return code.String(), advWrongCode
}

// record adds one adversary call to the history.
func (h *Harness) record(op AdversaryOp) {
	if op.Complete.IsZero() {
		op.Complete = time.Now()
	}
	h.Hist.addAdversary(op)
}

// staleLock is a released lock as a client that saw it could replay it.
type staleLock struct {
	id, name, shard, client string
	token                   int64
}

// stalePool keeps the ids of recently released locks and closed sessions.
type stalePool struct {
	mu       sync.Mutex
	locks    []staleLock
	sessions []string
}

const stalePoolSize = 64

func (p *stalePool) addLock(l staleLock) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.locks = append(p.locks, l)
	if len(p.locks) > stalePoolSize {
		p.locks = p.locks[len(p.locks)-stalePoolSize:]
	}
}

func (p *stalePool) addSession(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sessions = append(p.sessions, id)
	if len(p.sessions) > stalePoolSize {
		p.sessions = p.sessions[len(p.sessions)-stalePoolSize:]
	}
}

// lock returns a released lock whose key etcd has deleted, as the
// recorder saw: its id can never renew or release anything again.
func (p *stalePool) lock(rng *mrand.Rand, deleted func(shard string, rev int64) bool) (staleLock, bool) {
	p.mu.Lock()
	cands := append([]staleLock(nil), p.locks...)
	p.mu.Unlock()
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	for _, l := range cands {
		if _, rev, err := queue.SplitToken(l.token); err == nil && deleted(l.shard, rev) {
			return l, true
		}
	}
	return staleLock{}, false
}

func (p *stalePool) session(rng *mrand.Rand) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sessions) == 0 {
		return "", false
	}
	return p.sessions[rng.IntN(len(p.sessions))], true
}

// tamper returns an id that differs from id, and how it was made: a bit of
// one decoded byte flipped, a character replaced, the id cut short or
// lengthened. Every such id must be refused with invalid_argument before
// etcd is touched.
func tamper(rng *mrand.Rand, id string) (string, string) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	raw, err := base64.RawURLEncoding.DecodeString(id)
	switch k := rng.IntN(8); {
	case k < 5 && err == nil && len(raw) > 0:
		b := append([]byte(nil), raw...)
		i, bit := rng.IntN(len(b)), rng.IntN(8)
		b[i] ^= 1 << bit
		return base64.RawURLEncoding.EncodeToString(b), fmt.Sprintf("bit %d of byte %d/%d flipped", bit, i, len(b))
	case k == 5 && len(id) > 1:
		for range 16 {
			i := rng.IntN(len(id))
			c := alphabet[rng.IntN(len(alphabet))]
			if c == id[i] {
				continue
			}
			t := id[:i] + string(c) + id[i+1:]
			// A character's unused low bits at the end decode to the
			// same bytes: that is the same id, not an edited one.
			if d, err := base64.RawURLEncoding.DecodeString(t); err == nil && string(d) == string(raw) {
				continue
			}
			return t, fmt.Sprintf("character %d/%d replaced", i, len(id))
		}
		return id[:len(id)-1], "last character cut"
	case k == 6 && len(id) > 1:
		n := 1 + rng.IntN(min(8, len(id)-1))
		return id[:len(id)-n], fmt.Sprintf("%d characters cut", n)
	default:
		n := 1 + rng.IntN(4)
		return id + alphabet[:n], fmt.Sprintf("%d characters appended", n)
	}
}

// runAdversaries starts every adversary; they stop when ctx ends.
func (h *Harness) runAdversaries(ctx context.Context, wg *sync.WaitGroup, seed uint64) error {
	rng := func(stream uint64) *mrand.Rand { return mrand.New(mrand.NewPCG(seed, stream)) }
	tamperSDK, err := h.newSDK("adv-tamper", nil)
	if err != nil {
		return err
	}
	wg.Go(func() { h.runTamperer(ctx, tamperSDK, rng(101)) })
	sessSDK, err := h.newSDK("adv-session", nil)
	if err != nil {
		return err
	}
	wg.Go(func() { h.runSessionAdversary(ctx, sessSDK, rng(102)) })
	thiefSDK, err := h.newSDK("adv-thief", nil)
	if err != nil {
		return err
	}
	wg.Go(func() { h.runThief(ctx, thiefSDK, rng(103)) })
	resumeSDK, err := h.newSDK("adv-resume", nil)
	if err != nil {
		return err
	}
	wg.Go(func() { h.runResumer(ctx, resumeSDK, rng(104)) })
	abandonSDK, err := h.newSDK("adv-abandon", nil)
	if err != nil {
		return err
	}
	wg.Go(func() { h.runAbandoner(ctx, abandonSDK, "adv-abandon", rng(105)) })
	for i := range h.cfg.StableWorkers {
		who := fmt.Sprintf("s%d", i)
		s, err := h.newSDK(who, nil)
		if err != nil {
			return err
		}
		// Every other stable worker holds its locks in a session, whose
		// waiters ride on the gateways' attempt leases.
		withSession := i%2 == 1
		wg.Go(func() { h.runStable(ctx, s, who, withSession, rng(200+uint64(i))) })
	}
	return nil
}

// advPause waits the adversaries' pause, jittered, or until ctx ends.
func (h *Harness) advPause(ctx context.Context, rng *mrand.Rand) {
	d := h.cfg.AdversaryPause/2 + time.Duration(rng.Int64N(int64(h.cfg.AdversaryPause)+1))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// lockDeleted reports whether the recorder saw the key created at rev on
// shard deleted.
func (h *Harness) lockDeleted(shard string, rev int64) bool { return h.rec.deleted(shard, rev) }

// answerCode is the Connect code a gateway answered with, or "" when
// none answered (the client made the error up: no connection, a cut
// stream, its own deadline).
func answerCode(err error) string {
	if connect.IsWireError(err) {
		return connect.CodeOf(err).String()
	}
	return ""
}

// answerReason is the gateway's reason for err as a history records it:
// the ErrorReason's name, or "" when the answer carried none.
func answerReason(err error) string {
	if r := client.Reason(err); r != v1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		return r.String()
	}
	return ""
}
