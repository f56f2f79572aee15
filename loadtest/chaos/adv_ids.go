//go:build linux

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// runTamperer holds locks on the contended names and, while it holds one,
// renews and releases it with edited ids and foreign tokens, and replays
// other clients' released ids. After every release it attempts with a
// wrong id, it proves its own lock is still there with a genuine renewal.
func (h *Harness) runTamperer(ctx context.Context, s *sdk, rng *mrand.Rand) {
	const who = "adv-tamper"
	for ctx.Err() == nil {
		name := h.names[rng.IntN(len(h.names))]
		l, op := h.acquireWith(ctx, s, acquireSpec{who: who, role: "tamper", name: name,
			wait: time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))})
		if l == nil {
			h.replayOnce(ctx, s, rng)
			h.advPause(ctx, rng)
			continue
		}
		until := time.Now().Add(time.Second + time.Duration(rng.Int64N(int64(2*time.Second))))
		for time.Now().Before(until) && l.Err() == nil && ctx.Err() == nil {
			if _, _, err := h.Reg.Write(l.Context(), who, name, l.Token()); err != nil && l.Err() == nil && ctx.Err() == nil {
				break
			}
			if rng.IntN(3) == 0 {
				h.replayOnce(ctx, s, rng)
			} else {
				h.tamperOnce(ctx, s, rng, l)
			}
			h.advPause(ctx, rng)
		}
		if l.Err() != nil {
			h.lost(l, op)
			continue
		}
		h.release(l, op)
	}
}

// tamperOnce renews or releases l with an edited id or a foreign token,
// over Connect or REST.
func (h *Harness) tamperOnce(ctx context.Context, s *sdk, rng *mrand.Rand, l *client.Lock) {
	op := AdversaryOp{Adversary: "tamper", Name: l.Name(), Invoke: time.Now()}
	id, token := l.ID(), l.Token()
	var release bool
	var err error
	switch k := rng.IntN(6); k {
	case 0, 1:
		id, op.Detail = tamper(rng, id)
		release = k == 1
		op.Expect = codes(connect.CodeInvalidArgument)
		if release {
			op.Action = "release with an edited lock id (connect)"
			_, err = s.base.ReleaseByID(ctx, id, token)
		} else {
			op.Action = "renew with an edited lock id (connect)"
			_, err = s.base.RenewByID(ctx, id, token)
		}
	case 2, 3:
		token += 1 + rng.Int64N(1000)
		release = k == 3
		op.Expect = codes(connect.CodePermissionDenied)
		op.Detail = fmt.Sprintf("token %d instead of %d", token, l.Token())
		if release {
			op.Action = "release with its lock id and another token (connect)"
			_, err = s.base.ReleaseByID(ctx, id, token)
		} else {
			op.Action = "renew with its lock id and another token (connect)"
			_, err = s.base.RenewByID(ctx, id, token)
		}
	default:
		id, op.Detail = tamper(rng, id)
		release = k == 5
		op.Expect = "HTTP 400"
		path := "renew"
		if release {
			path = "release"
		}
		op.Action = path + " with an edited lock id (REST)"
		op.Got, op.Outcome = h.restCall(ctx, rng, path, id, token, http.StatusBadRequest)
		op.Complete = time.Now()
		h.record(op)
		if release {
			h.provenHeld(ctx, s, l, op.Action)
		}
		return
	}
	op.Complete = time.Now()
	if err == nil {
		op.Got, op.Outcome = "ok", advAccepted
	} else {
		op.Got, op.Outcome = classify(err, connect.CodeInvalidArgument, connect.CodePermissionDenied)
		if op.Outcome == advRefused && op.Got != op.Expect {
			op.Outcome = advWrongCode
		}
	}
	h.record(op)
	if release {
		h.provenHeld(ctx, s, l, op.Action)
	}
}

// provenHeld renews l with its genuine id right after an attempt to
// release it with a wrong one. A gateway proving the lock gone while its
// deadline has not passed means the wrong release freed it.
func (h *Harness) provenHeld(ctx context.Context, s *sdk, l *client.Lock, after string) {
	sent := time.Now()
	if l.Err() != nil || !sent.Before(l.Expires()) {
		return
	}
	rctx, cancel := context.WithDeadline(ctx, l.Expires())
	_, err := s.base.RenewByID(rctx, l.ID(), l.Token())
	cancel()
	op := AdversaryOp{Adversary: "tamper", Action: "genuine renew after: " + after, Name: l.Name(),
		Expect: "ok", Invoke: sent, Complete: time.Now(), Shard: l.Shard()}
	if err != nil {
		op.Reason = client.Reason(err).String()
	}
	// The deadline, moved by any renewal meanwhile: a refusal after it
	// proves nothing, the lease may have lapsed on its own.
	deadline := l.Expires()
	switch {
	case err == nil:
		op.Got, op.Outcome = "ok", advIntact
	case connect.IsWireError(err) && client.Reason(err) == client.ReasonEvicted:
		// Only the evict injection force-releases: the lock's end is its
		// doing, and hides what the edited call did.
		op.Got, op.Outcome = client.ReasonEvicted.String(), advEvicted
		op.Detail = fmt.Sprintf("the lock (token %d) was evicted meanwhile: %v", l.Token(), err)
	case connect.IsWireError(err) && proofRefused(err) && op.Complete.Before(deadline):
		op.Got, op.Outcome = connect.CodeOf(err).String(), advAccepted
		op.Detail = fmt.Sprintf("the lock (token %d) was proven gone at %s, before its deadline %s: %v", l.Token(), ts(op.Complete), ts(deadline), err)
	case connect.IsWireError(err) && proofRefused(err):
		op.Got, op.Outcome = connect.CodeOf(err).String(), advTransient
		op.Detail = fmt.Sprintf("proven gone at %s, after its deadline %s: it may have lapsed", ts(op.Complete), ts(deadline))
	default:
		op.Got, op.Outcome = classify(err)
	}
	h.record(op)
}

// replayOnce renews or releases a lock that etcd has deleted, with the id
// its holder was given, over Connect or REST.
func (h *Harness) replayOnce(ctx context.Context, s *sdk, rng *mrand.Rand) {
	st, ok := h.stale.lock(rng, h.lockDeleted)
	if !ok {
		return
	}
	op := AdversaryOp{Adversary: "replay", Name: st.name, Invoke: time.Now(),
		Detail: fmt.Sprintf("the id of %s's lock, token %d, released", st.client, st.token)}
	switch rng.IntN(3) {
	case 0:
		op.Action, op.Expect = "renew a released lock (connect)", codes(connect.CodeFailedPrecondition, connect.CodeNotFound)
		_, err := s.base.RenewByID(ctx, st.id, st.token)
		if err == nil {
			op.Got, op.Outcome = "ok", advAccepted
		} else {
			op.Got, op.Outcome = classify(err, connect.CodeFailedPrecondition, connect.CodeNotFound)
		}
	case 1:
		op.Action, op.Expect = "release a released lock (connect)", "ok, released false"
		released, err := s.base.ReleaseByID(ctx, st.id, st.token)
		switch {
		case err == nil && released:
			op.Got, op.Outcome = "released", advAccepted
		case err == nil:
			op.Got, op.Outcome = "ok, released false", advNoop
		default:
			op.Got, op.Outcome = classify(err, connect.CodeNotFound)
		}
	default:
		op.Action, op.Expect = "renew a released lock (REST)", "HTTP 409|404"
		op.Got, op.Outcome = h.restCall(ctx, rng, "renew", st.id, st.token, http.StatusConflict, http.StatusNotFound)
	}
	op.Complete = time.Now()
	h.record(op)
}

// restCall posts a renew or release to a random gateway's REST API and
// judges the status against want.
func (h *Harness) restCall(ctx context.Context, rng *mrand.Rand, path, id string, token int64, want ...int) (got, outcome string) {
	body, _ := json.Marshal(map[string]any{"lockId": id, "fencingToken": token})
	if path == "renew" {
		body, _ = json.Marshal(map[string]any{"lockId": id, "fencingToken": token, "ttlMs": h.cfg.TTL.Milliseconds()})
	}
	g := h.Gateways[rng.IntN(len(h.Gateways))]
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, g.Front.URL()+"/api/v1/locks/"+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "no answer", advTransient
	}
	resp.Body.Close()
	got = fmt.Sprintf("HTTP %d", resp.StatusCode)
	switch {
	case slices.Contains(want, resp.StatusCode):
		return got, advRefused
	case resp.StatusCode < 300:
		return got, advAccepted
	case resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout,
		resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway:
		return got, advTransient
	}
	return got, advWrongCode
}

// rawSession is a session the session adversary keeps alive itself.
type rawSession struct {
	id       string
	ttl      time.Duration
	deadline time.Time // as the SDK would reckon it
	next     time.Time // next keepalive
	closeAt  time.Time
}

// runSessionAdversary keeps a session of its own and, between its genuine
// keepalives, keeps it alive, closes it and acquires with edited ids, and
// keeps alive and closes sessions closed before. After each edited close it
// proves its session alive with a genuine keepalive.
func (h *Harness) runSessionAdversary(ctx context.Context, s *sdk, rng *mrand.Rand) {
	var sess *rawSession
	defer func() {
		if sess != nil {
			h.closeRawSession(context.WithoutCancel(ctx), s, sess)
		}
	}()
	for ctx.Err() == nil {
		h.advPause(ctx, rng)
		if sess != nil && (time.Now().After(sess.closeAt) || !time.Now().Before(sess.deadline)) {
			h.closeRawSession(ctx, s, sess)
			sess = nil
		}
		if sess == nil {
			sess = h.openRawSession(ctx, s, rng)
			continue
		}
		if !time.Now().Before(sess.next) {
			h.keepRawSession(ctx, s, sess, "")
			continue
		}
		rpc := s.raw(h.Gateways[rng.IntN(len(h.Gateways))].Front.URL())
		op := AdversaryOp{Adversary: "session", Invoke: time.Now()}
		var err error
		closing := false
		switch k := rng.IntN(5); {
		case k <= 2:
			id, how := tamper(rng, sess.id)
			op.Detail, op.Expect = how, codes(connect.CodeInvalidArgument)
			switch k {
			case 0:
				op.Action = "keep alive an edited session id"
				_, err = rpc.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: id}))
			case 1:
				op.Action, closing = "close an edited session id", true
				_, err = rpc.CloseSession(ctx, connect.NewRequest(&v1.CloseSessionRequest{SessionId: id}))
			default:
				op.Action = "try-acquire with an edited session id"
				op.Name = h.names[rng.IntN(len(h.names))]
				_, err = rpc.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: op.Name, ClientId: "adv-session", SessionId: id}))
			}
			if err == nil {
				op.Got, op.Outcome = "ok", advAccepted
			} else {
				op.Got, op.Outcome = classify(err, connect.CodeInvalidArgument)
			}
		default:
			old, ok := h.stale.session(rng)
			if !ok {
				continue
			}
			// A gateway that started after a shard left the map does not
			// know the shard of an old session's lease: not_found.
			op.Detail = "a closed session's id"
			if k == 3 {
				op.Action, op.Expect = "keep alive a closed session", codes(connect.CodeFailedPrecondition, connect.CodeNotFound)
				_, err = rpc.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: old}))
				if err == nil {
					op.Got, op.Outcome = "ok", advAccepted
				} else {
					op.Got, op.Outcome = classify(err, connect.CodeFailedPrecondition, connect.CodeNotFound)
				}
			} else {
				op.Action, op.Expect = "close a closed session", "ok (no-op)|"+codes(connect.CodeNotFound)
				_, err = rpc.CloseSession(ctx, connect.NewRequest(&v1.CloseSessionRequest{SessionId: old}))
				if err == nil {
					op.Got, op.Outcome = "ok", advNoop
				} else {
					op.Got, op.Outcome = classify(err, connect.CodeNotFound)
				}
			}
		}
		op.Complete = time.Now()
		h.record(op)
		if closing {
			h.keepRawSession(ctx, s, sess, op.Action)
		}
	}
}

func (h *Harness) openRawSession(ctx context.Context, s *sdk, rng *mrand.Rand) *rawSession {
	rpc := s.raw(h.Gateways[rng.IntN(len(h.Gateways))].Front.URL())
	ttl := 2 * h.cfg.TTL
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := rpc.OpenSession(rctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: "adv-session", TtlMs: ttl.Milliseconds()}))
	if err != nil {
		return nil
	}
	m := resp.Msg
	sttl := time.Duration(m.TtlMs) * time.Millisecond
	return &rawSession{id: m.SessionId, ttl: sttl, deadline: sessionDeadline(sent, sttl, m.ValidForMs),
		next: sent.Add(sttl / 3), closeAt: time.Now().Add(5*time.Second + time.Duration(rng.Int64N(int64(5*time.Second))))}
}

func sessionDeadline(sent time.Time, ttl time.Duration, validMs int64) time.Time {
	d := ttl
	if v := time.Duration(validMs) * time.Millisecond; v > 0 && v < d {
		d = v
	}
	return sent.Add(d - sdkMargin(ttl))
}

// keepRawSession sends a genuine keepalive. after, when set, names the
// edited call it follows: a gateway proving the session gone before its
// deadline then means that call ended it.
func (h *Harness) keepRawSession(ctx context.Context, s *sdk, sess *rawSession, after string) {
	sent := time.Now()
	if !sent.Before(sess.deadline) {
		return
	}
	rctx, cancel := context.WithDeadline(ctx, sess.deadline)
	defer cancel()
	var resp *connect.Response[v1.KeepAliveSessionResponse]
	var err error
	for _, g := range h.Gateways {
		resp, err = s.raw(g.Front.URL()).KeepAliveSession(rctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: sess.id}))
		if err == nil || proofRefused(err) {
			break
		}
	}
	now := time.Now()
	switch {
	case err == nil && now.Before(sess.deadline):
		sess.deadline = maxTime(sess.deadline, sessionDeadline(sent, time.Duration(resp.Msg.TtlMs)*time.Millisecond, resp.Msg.ValidForMs))
		sess.next = sent.Add(sess.ttl / 3)
	case err != nil && connect.IsWireError(err) && proofRefused(err) && after != "" && now.Before(sess.deadline):
		h.record(AdversaryOp{Adversary: "session", Action: "genuine keepalive after: " + after, Expect: "ok",
			Got: connect.CodeOf(err).String(), Outcome: advAccepted, Invoke: sent, Complete: now,
			Detail: fmt.Sprintf("the session was proven gone before its deadline %s: %v", ts(sess.deadline), err)})
		sess.deadline = now // lost: the loop opens another
	case err != nil && proofRefused(err):
		sess.deadline = now
	default:
		sess.next = now.Add(100 * time.Millisecond)
	}
	if after != "" && err == nil {
		h.record(AdversaryOp{Adversary: "session", Action: "genuine keepalive after: " + after, Expect: "ok",
			Got: "ok", Outcome: advIntact, Invoke: sent, Complete: now})
	}
}

// closeRawSession closes sess and, once a gateway confirmed, offers its id
// to the replays.
func (h *Harness) closeRawSession(ctx context.Context, s *sdk, sess *rawSession) {
	for _, g := range h.Gateways {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := s.raw(g.Front.URL()).CloseSession(rctx, connect.NewRequest(&v1.CloseSessionRequest{SessionId: sess.id}))
		cancel()
		if err == nil {
			h.stale.addSession(sess.id)
			return
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
