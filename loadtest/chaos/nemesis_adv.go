//go:build linux

package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/netfault"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// The faults behind the adversaries' scenarios: answers from etcd delayed
// at one gateway while holders renew through it, a gateway stopped under
// session waiters that never come back, a stream resumed on one gateway
// while the other's cleanup is held up, and leasectl holders killed.

// twoGateways picks a gateway, its index, and another gateway.
func (n *nemesis) twoGateways() (int, *Gateway, *Gateway) {
	i := n.rng.IntN(len(n.h.Gateways))
	return i, n.h.Gateways[i], n.h.Gateways[(i+1)%len(n.h.Gateways)]
}

// setLinks puts f on every link from g to etcd.
func setLinks(g *Gateway, f netfault.Fault) {
	for _, l := range g.Etcd {
		l.Set(f)
	}
}

// keepaliveDelay delays what etcd answers one gateway (netfault's
// ReplyDelay: requests arrive and take effect, answers come late) while
// holders renew through it. Per cluster, one name's holder reaches only
// that gateway; another's reaches it first and the other gateway after it;
// a third's reaches only it with a TTL long enough (12 s) that the SDK
// waits out the delayed answers to its renewals. A rival on the other
// gateway waits for each name, and two more holders keep names of their
// own through the whole fault. What each holder believed is judged by the
// belief checker: a rival must never be granted while a holder's Context
// is live.
func (n *nemesis) keepaliveDelay(ctx context.Context, in *Injection) error {
	h := n.h
	gi, g, other := n.twoGateways()
	oi := (gi + 1) % len(h.Gateways)
	delay := n.between(2*time.Second, 3*time.Second)
	in.Target = g.Name + "->etcd answers"
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	grants, losses := 0, 0
	cycle := func(s *sdk, who, name string, ttl, minHold, maxHold time.Duration) {
		for wctx.Err() == nil {
			l, op := h.acquireWith(wctx, s, acquireSpec{who: who, role: "keepalive", name: name, wait: 8 * time.Second, ttl: ttl})
			if l == nil {
				n.sleep(wctx, 50*time.Millisecond)
				continue
			}
			lost := h.holdFor(wctx, l, op, who, n.between(minHold, maxHold))
			mu.Lock()
			grants++
			if lost {
				losses++
			}
			mu.Unlock()
		}
	}
	ttl := h.cfg.TTL
	for _, c := range h.clustersInMap() {
		for _, hd := range []struct {
			s   *sdk
			who string
			ttl time.Duration
		}{{n.pinned[gi], "ka-" + g.Name, ttl}, {n.first[gi], "ka-" + g.Name + "-first", ttl}, {n.patient[gi], "ka-" + g.Name + "-patient", 12 * time.Second}} {
			name := h.freshName("renewing", c)
			wg.Go(func() { cycle(hd.s, hd.who, name, hd.ttl, ttl/2, 2*ttl) })
			wg.Go(func() {
				n.sleep(wctx, 300*time.Millisecond) // the holder first
				cycle(n.pinned[oi], "ka-"+other.Name+"-rival", name, ttl, ttl/2, 2*ttl)
			})
		}
		for _, s := range []*sdk{n.pinned[gi], n.first[gi]} {
			name := h.freshName("renewing", c)
			wg.Go(func() { cycle(s, "ka-"+g.Name+"-own", name, ttl, 10*time.Second, 12*time.Second) })
		}
	}
	// Holders take their locks before the fault, so that it hits their
	// renewals rather than their acquires.
	n.sleep(ctx, time.Second)
	in.Start = time.Now()
	setLinks(g, netfault.Fault{ReplyDelay: delay})
	probed := n.availability(ctx, in, nil, in.Start, 15*time.Second)
	n.sleep(ctx, 6*time.Second)
	setLinks(g, netfault.Fault{})
	in.Heal = time.Now()
	// Answers delayed before the heal still arrive late: keep holding
	// through them.
	n.sleep(ctx, delay+h.cfg.TTL)
	stop()
	wg.Wait()
	<-probed
	in.Note = fmt.Sprintf("reply delay %s; %d grants held through it, %d lost", delay.Round(time.Millisecond), grants, losses)
	return nil
}

// rngInt64N draws from the nemesis's generator under a lock: the
// keepalive holders draw concurrently.
func (n *nemesis) rngInt64N(k int64) int64 {
	n.rngMu.Lock()
	defer n.rngMu.Unlock()
	return n.rng.Int64N(k)
}

// holdFor writes the lock's token every 100 ms for d, checking the lock
// before each write, then releases. It reports whether the lock was lost.
func (h *Harness) holdFor(ctx context.Context, l *client.Lock, op *AcquireOp, who string, d time.Duration) bool {
	end := time.After(d)
	for {
		select {
		case <-l.Done():
			h.lost(l, op)
			return true
		default:
		}
		if _, _, err := h.Reg.Write(l.Context(), who, op.Name, op.Token); err != nil && l.Err() != nil {
			h.lost(l, op)
			return true
		}
		select {
		case <-l.Done():
			h.lost(l, op)
			return true
		case <-end:
			h.release(l, op)
			return false
		case <-ctx.Done():
			h.release(l, op)
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sessionWaiter is a session waiter of gatewayShutdown: a client that keeps
// its session alive through the other gateway and never comes back for
// its wait.
type sessionWaiter struct {
	id     string // session id
	op     *AcquireOp
	queued chan struct{}
	done   chan struct{}
	g      *v1.Granted
	err    error
}

// gatewayShutdown stops a gateway gracefully (SIGTERM) while session
// waiters wait on it behind a holder on the other gateway. Their clients
// keep their sessions alive but never come back for the waits, so nobody
// resumes the waiters; the holder then releases. A waiter's key rides on
// the stopped gateway's attempt lease until granted, so the name must be
// free within the attempt TTL of the gateway's exit — not blocked for as
// long as the sessions live.
func (n *nemesis) gatewayShutdown(ctx context.Context, in *Injection) error {
	h := n.h
	gi, g, other := n.twoGateways()
	oi := (gi + 1) % len(h.Gateways)
	c := n.pickCluster()
	name := h.freshName("stopped", c.Name)
	in.Target, in.Clusters = fmt.Sprintf("%s (session waiters on %s)", g.Name, name), []string{c.Name}
	if err := n.awaitServes(ctx, gi, c.Name); err != nil {
		in.Note = err.Error()
		return nil
	}
	l, op := h.acquireWith(ctx, n.pinned[oi], acquireSpec{who: "sd-holder", role: "nemesis", name: name, wait: 10 * time.Second})
	if l == nil {
		in.Note = "holder not granted: " + op.Err
		return nil
	}
	onG, onOther := n.pinned[gi].raw(g.Front.URL()), n.pinned[oi].raw(other.Front.URL())
	kctx, stopKeep := context.WithCancel(ctx)
	var keepers sync.WaitGroup
	var waiters []*sessionWaiter
	defer func() {
		stopKeep()
		keepers.Wait()
		for _, w := range waiters {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if _, err := onOther.CloseSession(cctx, connect.NewRequest(&v1.CloseSessionRequest{SessionId: w.id})); err == nil {
				h.stale.addSession(w.id)
			}
			cancel()
		}
	}()
	for k := range 2 {
		who := fmt.Sprintf("sd-waiter-%d", k)
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := onOther.OpenSession(octx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: who, TtlMs: h.cfg.TTL.Milliseconds()}))
		cancel()
		if err != nil {
			continue
		}
		w := &sessionWaiter{id: resp.Msg.SessionId, queued: make(chan struct{}), done: make(chan struct{})}
		keepers.Go(func() {
			for {
				select {
				case <-kctx.Done():
					return
				case <-time.After(h.cfg.TTL / 3):
				}
				rctx, cancel := context.WithTimeout(kctx, h.cfg.TTL/3)
				_, _ = onOther.KeepAliveSession(rctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: w.id}))
				cancel()
			}
		})
		rid := newRequestID()
		w.op = h.Hist.begin(&AcquireOp{Client: who, Role: "session-waiter", Name: name, RequestID: rid, Wait: 30 * time.Second, Invoke: time.Now()})
		req := &v1.AcquireRequest{Name: name, ClientId: who, RequestId: rid, SessionId: w.id, WaitTimeoutMs: (30 * time.Second).Milliseconds()}
		go func() {
			defer close(w.done)
			w.g, _, w.err = h.rawAttempt(ctx, onG, w.op, req, func() { close(w.queued) })
			if w.g != nil {
				h.rawGranted(w.op, w.g)
			} else {
				h.rawFailed(ctx, w.op, w.err)
			}
		}()
		waiters = append(waiters, w)
	}
	for _, w := range waiters {
		if !await(ctx, w.queued, 5*time.Second) {
			in.Note = "a session waiter was not queued on " + g.Name
			h.release(l, op)
			return nil
		}
	}
	in.Start = time.Now()
	probed := n.availability(ctx, in, nil, in.Start, 15*time.Second)
	releaseFirst := n.rng.IntN(2) == 0
	stopped := make(chan time.Time, 1)
	go func() { stopped <- g.Stop() }()
	if releaseFirst {
		h.release(l, op) // the release races the shutdown
	}
	exit := <-stopped
	if !releaseFirst {
		h.release(l, op)
	}
	released := time.Now()
	delivered := 0
	for _, w := range waiters {
		if !await(ctx, w.done, 5*time.Second) {
			continue
		}
		if w.g != nil {
			// The grant reached its client before the shutdown: that
			// client holds the lock and lets go at once.
			delivered++
			now := time.Now()
			h.Hist.update(func() { w.op.End = now })
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, _ = onOther.Release(rctx, connect.NewRequest(&v1.ReleaseRequest{LockId: w.g.LockId, FencingToken: w.g.FencingToken}))
			cancel()
		}
	}
	// Nobody comes back for the others: the name must come free within
	// the attempt TTL of the gateway's exit.
	from := maxTime(exit, released)
	bound := h.cfg.AttemptTTL + 1500*time.Millisecond
	pl, pop := h.acquireWith(ctx, n.pinned[oi], acquireSpec{who: "nemesis", role: "nemesis", name: name,
		wait: time.Until(from.Add(bound + h.cfg.TTL + 3*time.Second))})
	if pl == nil {
		in.Violation = fmt.Sprintf("%s stayed blocked %s after %s stopped with session waiters (attempt TTL %s): %s",
			name, time.Since(from).Round(time.Millisecond), g.Name, h.cfg.AttemptTTL, pop.Err)
	} else {
		in.Freed = pop.Complete.Sub(from)
		if in.Freed > bound {
			in.Violation = fmt.Sprintf("%s was blocked %s after %s stopped with session waiters, past the attempt TTL %s + 1.5s",
				name, in.Freed.Round(time.Millisecond), g.Name, h.cfg.AttemptTTL)
		}
		h.release(pl, pop)
	}
	err := g.Start()
	in.Heal = time.Now()
	<-probed
	in.Note = fmt.Sprintf("%s exited %s after SIGTERM; holder released %s it; %d of %d waiters' grants delivered; name free %s after both",
		g.Name, exit.Sub(in.Start).Round(time.Millisecond), map[bool]string{true: "before", false: "after"}[releaseFirst],
		delivered, len(waiters), in.Freed.Round(time.Millisecond))
	return err
}

// streamResume runs abort-and-resume rounds from one gateway to the other
// while the first one's link to etcd is slowed: each round's acquire is
// queued on the first gateway behind a holder, a rival queues behind it,
// the first gateway's link is delayed, the stream is aborted and resumed
// with the same request id on the second gateway, and the holder releases.
// The first gateway's cleanup of the aborted attempt lands late, after the
// retry took the waiter over: it must delete nothing, or the rival would
// be granted while the resumed holder holds.
func (n *nemesis) streamResume(ctx context.Context, in *Injection) error {
	h := n.h
	gi, first, second := n.twoGateways()
	si := (gi + 1) % len(h.Gateways)
	c := n.pickCluster()
	in.Clusters = []string{c.Name}
	// Long enough for the cleanup to land well after the retry's takeover
	// (a few milliseconds), short enough not to open the first gateway's
	// circuit breaker.
	delay := n.between(300*time.Millisecond, time.Second)
	fault := netfault.Fault{Delay: delay}
	if n.rng.IntN(3) == 0 {
		fault = netfault.Fault{ReplyDelay: delay}
	}
	in.Target = fmt.Sprintf("%s->etcd slowed, resumed on %s", first.Name, second.Name)
	in.Start = time.Now()
	probed := n.availability(ctx, in, in.Clusters, in.Start, 15*time.Second)
	var notes []string
	for range 3 {
		if err := n.awaitServes(ctx, gi, c.Name); err != nil {
			notes = append(notes, err.Error())
			continue
		}
		name := h.freshName("resume", c.Name)
		l, op := h.acquireWith(ctx, n.pinned[si], acquireSpec{who: "rs-holder", role: "nemesis", name: name, wait: 10 * time.Second})
		if l == nil {
			notes = append(notes, "holder not granted")
			continue
		}
		rivalDone := make(chan *AcquireOp, 1)
		rivalStarted := false
		var released sync.WaitGroup
		var releaseOnce sync.Once
		releaseHolder := func() { releaseOnce.Do(func() { h.release(l, op) }) }
		op2, resumed := h.abortAndResume(ctx, n.resumer, resumeRound{
			who: "rs-resume", first: first, second: second, name: name,
			wait: 10 * time.Second, holdFor: 3 * h.cfg.TTL / 2, renewer: n.pinned[si].base,
			beforeAbort: func() {
				// A rival queues behind the resumed waiter, then the first
				// gateway's link slows down.
				rivalStarted = true
				go func() {
					rl, rop := h.acquireWith(ctx, n.pinned[si], acquireSpec{who: "rs-rival", role: "nemesis", name: name, wait: 15 * time.Second})
					if rl != nil {
						h.hold(ctx, rl, rop, "rs-rival", 1, 10*time.Millisecond)
					}
					rivalDone <- rop
				}()
				for i := 0; i < 100; i++ {
					var q bool
					h.Hist.update(func() {
						for _, a := range h.Hist.Acquires[max(len(h.Hist.Acquires)-200, 0):] {
							q = q || a.Name == name && a.Client == "rs-rival" && !a.Queued.IsZero()
						}
					})
					if q {
						break
					}
					n.sleep(ctx, 20*time.Millisecond)
				}
				setLinks(first, fault)
			},
			queuedAgain: func() {
				released.Go(func() {
					n.sleep(ctx, n.between(50*time.Millisecond, 300*time.Millisecond))
					releaseHolder()
				})
			},
		})
		released.Wait()
		releaseHolder() // if the retry was never queued
		setLinks(first, netfault.Fault{})
		var r1 AcquireOp
		h.Hist.update(func() { r1 = *op2 })
		if !rivalStarted {
			notes = append(notes, fmt.Sprintf("not queued on %s: %s %s", first.Name, r1.Outcome, r1.Err))
			continue
		}
		rop := <-rivalDone
		var r2 AcquireOp
		h.Hist.update(func() { r2 = *rop })
		notes = append(notes, fmt.Sprintf("resumed %v: %s token %d held until %s; rival %s token %d at %s",
			resumed, r1.Outcome, r1.Token, ts(r1.believedUntil()), r2.Outcome, r2.Token, ts(r2.Complete)))
	}
	in.Heal = time.Now()
	<-probed
	in.Note = fmt.Sprintf("%s %s; %v", map[bool]string{true: "delay", false: "reply delay"}[fault.Delay > 0], delay.Round(time.Millisecond), notes)
	return nil
}

// awaitServes waits, at most 15 s, until gateway gi grants a name of
// cluster (its circuit breaker may still be open after a fault).
func (n *nemesis) awaitServes(ctx context.Context, gi int, cluster string) error {
	h := n.h
	var last error
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end) && ctx.Err() == nil; {
		name := h.freshName("serves", cluster)
		l, err := n.pinned[gi].base.TryAcquire(ctx, name, client.WithTTL(h.cfg.TTL))
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = l.Release(rctx)
			cancel()
			return nil
		}
		last = err
		n.sleep(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("%s did not serve %s within 15s: %v", h.Gateways[gi].Name, cluster, last)
}
