//go:build linux

package chaos

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// evict force-releases holders by their fencing tokens, as an operator
// evicting a stuck holder does (AdminService.ForceRelease with the token;
// the gateways run without authentication on loopback, so the harness is
// the local operator, an admin). Per cluster in the map, two holders of
// fresh names — one with a lease of its own, one in a session — each with
// a rival queued behind it on the other gateway, are evicted after holding
// 200 ms to 2.5 s: before the SDK opens its hold watch
// (client.DefaultHoldWatchAfter) or after. Beside them, every 250 ms for
// 4 s, the holder of a contended name, as Describe reports it, is evicted
// by its token: a worker, a stable or re-entrant worker, the resumer. Each
// force-release is sent once, to one gateway, and recorded with its answer
// (History.Evictions); the checkers hold every evicted holder to its bound
// (check_evict.go).
func (n *nemesis) evict(ctx context.Context, in *Injection) error {
	h := n.h
	in.Target = "holders, by fencing token"
	in.Start = time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var notes []string
	var freed []time.Duration
	i := 0
	for _, c := range h.clustersInMap() {
		for _, withSession := range []bool{false, true} {
			gi := i % len(h.Gateways)
			i++
			name := h.freshName("evicted", c)
			after := n.between(200*time.Millisecond, 2500*time.Millisecond)
			wg.Go(func() {
				note, d := n.evictHolder(ctx, gi, name, withSession, after)
				mu.Lock()
				defer mu.Unlock()
				notes = append(notes, note)
				if d >= 0 {
					freed = append(freed, d)
				}
			})
		}
	}
	outcomes := map[string]int{}
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end) && ctx.Err() == nil; {
		name := h.names[n.rngInt64N(int64(len(h.names)))]
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		d, err := n.evictor.base.Describe(dctx, name)
		cancel()
		if err == nil && d.Held && d.Token != 0 {
			outcomes[n.forceRelease(ctx, name, d.Token).Outcome]++
		}
		n.sleep(ctx, 250*time.Millisecond)
	}
	wg.Wait()
	in.Heal = time.Now()
	sort.Strings(notes)
	in.Unavailable = -1
	for _, d := range freed {
		in.Unavailable = max(in.Unavailable, d)
	}
	in.Freed = max(in.Unavailable, 0)
	in.Note = fmt.Sprintf("contended names' holders: %d evicted, %d refused (holder changed), %d free, %d unknown; %v",
		outcomes[evictEvicted], outcomes[evictRefused], outcomes[evictFree], outcomes[evictUnknown], notes)
	return nil
}

// evictHolder runs one holder of name (on its own lease, or in a session)
// through the gateways in the order gateway gi first, with a rival queued
// behind it on the other gateway, evicts it after it has held for after,
// and waits for both. It returns what happened and the time from the
// eviction's send to the rival's grant (-1 when not granted).
func (n *nemesis) evictHolder(ctx context.Context, gi int, name string, withSession bool, after time.Duration) (string, time.Duration) {
	h := n.h
	oi := (gi + 1) % len(h.Gateways)
	s := n.first[gi]
	who := "ev-holder"
	var sess *client.Session
	if withSession {
		who = "ev-session-holder"
		var err error
		if sess, err = s.base.OpenSession(ctx, client.WithTTL(h.cfg.TTL)); err != nil {
			return who + ": no session: " + err.Error(), -1
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = sess.Close(cctx)
			cancel()
		}()
	}
	l, op := h.acquireWith(ctx, s, acquireSpec{who: who, role: "evictee", name: name, wait: 5 * time.Second, session: sess})
	if l == nil {
		return who + " not granted: " + op.Err, -1
	}
	var granted time.Time
	h.Hist.update(func() { granted = op.Complete })
	rival := make(chan *AcquireOp, 1)
	go func() {
		rl, rop := h.acquireWith(ctx, n.pinned[oi], acquireSpec{who: "ev-rival", role: "nemesis", name: name, wait: after + 8*time.Second})
		if rl != nil {
			h.hold(ctx, rl, rop, "ev-rival", 1, 20*time.Millisecond)
		}
		rival <- rop
	}()
	held := make(chan struct{})
	go func() {
		defer close(held)
		h.holdFor(ctx, l, op, who, after+6*time.Second) // released unless evicted first
	}()
	n.sleep(ctx, time.Until(granted.Add(after)))
	e := n.forceRelease(ctx, name, l.Token())
	<-held
	rop := <-rival
	var got, r AcquireOp
	h.Hist.update(func() { got, r = *op, *rop })
	note := fmt.Sprintf("%s held %s: %s", who, e.Invoke.Sub(granted).Round(time.Millisecond), e.Outcome)
	if got.Lost {
		// End: when the holder noticed (its Context's end, DoneAt, may
		// be recorded a moment later).
		note += fmt.Sprintf(", noticed %s later (%v)", got.End.Sub(e.Invoke).Round(time.Millisecond), map[bool]string{true: "ErrEvicted", false: got.LostErr}[got.ToldEvicted])
	} else {
		note += ", not told"
	}
	if r.Outcome != outGranted {
		return note + "; rival " + r.Outcome, -1
	}
	return note, r.Complete.Sub(e.Invoke)
}

// forceRelease evicts name's holder with token, in one call to a gateway
// picked at random, and records what it answered.
func (n *nemesis) forceRelease(ctx context.Context, name string, token int64) Eviction {
	h := n.h
	g := h.Gateways[n.rngInt64N(int64(len(h.Gateways)))]
	e := Eviction{Name: name, Token: token, Gateway: g.Name, Invoke: time.Now()}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := n.evictor.rawAdmin(g.Front.URL()).ForceRelease(fctx, connect.NewRequest(&v1.ForceReleaseRequest{
		Name: name, Reason: "chaos: evicted by its token", FencingToken: token}))
	cancel()
	e.Complete = time.Now()
	switch {
	case err == nil && resp.Msg.Released:
		e.Outcome, e.Client = evictEvicted, resp.Msg.EvictedClientId
	case err == nil:
		e.Outcome = evictFree
	case connect.IsWireError(err) && refusedAtOnce(err):
		e.Outcome, e.Err = evictRefused, err.Error()
		if c := connect.CodeOf(err); c == connect.CodePermissionDenied || c == connect.CodeUnauthenticated {
			h.harnessErr(fmt.Errorf("evict: the gateways refused the harness as an admin: %w", err))
		}
	default:
		e.Outcome, e.Err = evictUnknown, err.Error()
	}
	h.Hist.addEviction(e)
	return e
}

// refusedAtOnce reports an answer that a gateway gives before it touches
// etcd, or after a transaction that changed nothing: nothing was evicted.
func refusedAtOnce(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition, connect.CodePermissionDenied, connect.CodeUnauthenticated,
		connect.CodeInvalidArgument, connect.CodeNotFound:
		return true
	}
	return false
}
