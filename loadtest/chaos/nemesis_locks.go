//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasegate/leasegate/internal/netfault"
	"github.com/leasegate/leasegate/locks"
	"github.com/leasegate/leasegate/shard"
)

// holderFault crashes a lock holder: SIGSTOP past its TTL and SIGCONT
// (holder-pause), or SIGKILL (holder-kill). The nemesis takes the lock
// over, measuring how long the crashed holder kept the name, and writes
// with its newer token; a paused holder's writes after it wakes must then
// be refused by the register.
func (n *nemesis) holderFault(ctx context.Context, in *Injection) error {
	c := n.pickCluster()
	name := n.h.freshName("held", c.Name)
	in.Clusters = []string{c.Name}
	hp, err := n.h.startHolder(name)
	if err != nil {
		return err
	}
	defer hp.p.kill()
	ev, ok := hp.next("granted", 20*time.Second)
	if !ok || ev.Ev != "granted" {
		in.Note = fmt.Sprintf("holder was not granted: %s", ev.Err)
		return nil
	}
	n.h.Hist.begin(&AcquireOp{Client: hp.p.name, Role: "holder", Name: name, RequestID: ev.RequestID,
		Wait: 10 * time.Second, Invoke: ev.Invoke, Complete: ev.At, Outcome: outGranted, Token: ev.Token, Shard: ev.Shard})
	in.Target = fmt.Sprintf("%s (%s, token %d)", hp.p.name, name, ev.Token)
	if _, ok := hp.next("write", 5*time.Second); !ok {
		in.Note = "holder never wrote"
		return nil
	}
	n.sleep(ctx, n.between(0, n.h.cfg.TTL/2))
	in.Start = time.Now()
	if in.Kind == kindHolderKill {
		hp.p.kill()
	} else if err := hp.p.pause(); err != nil {
		return err
	}
	l, op := n.h.acquire(ctx, n.h.probes, "nemesis", "nemesis", name, n.h.cfg.TTL+8*time.Second)
	if l == nil {
		in.Violation = fmt.Sprintf("the crashed holder's lock was not freed within TTL+8s: %s", op.Err)
		_ = hp.p.resume()
		return nil
	}
	in.Freed = op.Complete.Sub(in.Start)
	in.Unavailable = in.Freed
	if _, _, err := n.h.Reg.Write(ctx, "nemesis", name, op.Token); err != nil {
		return err
	}
	n.h.release(l, op)
	if in.Kind == kindHolderKill {
		in.Heal = time.Now()
		return nil
	}
	n.sleep(ctx, time.Until(in.Start.Add(n.h.cfg.TTL+time.Second)))
	resumed := time.Now()
	if err := hp.p.resume(); err != nil {
		return err
	}
	in.Heal = resumed
	lost, _ := hp.next("lost", 3*time.Second)
	n.sleep(ctx, 300*time.Millisecond)
	var after, accepted int
	n.h.Hist.update(func() {
		for _, r := range n.h.Hist.Register {
			if r.Client == hp.p.name && r.Write && r.Invoke.After(resumed) {
				after++
				if r.OK {
					accepted++
				}
			}
		}
	})
	in.Note = fmt.Sprintf("freed after %s; after SIGCONT: %d writes, %d accepted; SDK loss signal: %q",
		in.Freed.Round(time.Millisecond), after, accepted, lost.Err)
	if accepted > 0 {
		in.Violation = fmt.Sprintf("the resumed holder's stale token %d was accepted %d times", ev.Token, accepted)
	}
	return nil
}

// reshard moves the map between {c0, c1} and {c0} with the Resharder's
// Apply and then Sweep, while the workers keep taking locks.
func (n *nemesis) reshard(ctx context.Context, in *Injection) error {
	h := n.h
	eps := map[string][]string{}
	var all []shard.Cluster
	for _, c := range h.Clusters {
		eps[c.Name] = c.Endpoints()
		all = append(all, shard.Cluster{Name: c.Name, Endpoints: c.Endpoints()})
	}
	rs := &shard.Resharder{Store: shard.NewStore(h.Clusters[0].Client, ""), Endpoints: eps, Names: locks.Names{}}
	target := all
	if len(h.clustersInMap()) == len(all) {
		target = all[:1]
	}
	in.Target = fmt.Sprint(names(target))
	in.Start = time.Now()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := rs.Apply(actx, target)
	if err != nil {
		in.Note = "apply failed: " + err.Error()
		return nil
	}
	h.mu.Lock()
	h.inMap, h.epoch = m.ClusterNames(), m.Epoch
	h.mu.Unlock()
	probed := n.availability(ctx, in, nil, in.Start, 15*time.Second)
	m, err = rs.Sweep(actx, 200*time.Millisecond)
	in.Heal = time.Now()
	<-probed
	in.Note = fmt.Sprintf("epoch %d; applied and swept in %s", m.Epoch, in.Heal.Sub(in.Start).Round(time.Millisecond))
	if err != nil {
		in.Note += "; sweep: " + err.Error()
	}
	return nil
}

func names(cs []shard.Cluster) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// releaseReplyLost releases a lock through a link that loses the reply:
// the release takes effect, the SDK times out and retries on the other
// gateway. The retry must not free the waiter granted in between.
func (n *nemesis) releaseReplyLost(ctx context.Context, in *Injection) error {
	h := n.h
	c := n.pickCluster()
	name := h.freshName("release", c.Name)
	in.Target, in.Clusters = name, []string{c.Name}
	l, op := h.acquire(ctx, n.releaser, "releaser", "nemesis", name, 10*time.Second)
	if l == nil {
		in.Note = "releaser not granted: " + op.Err
		return nil
	}
	type waited struct {
		op  *AcquireOp
		err error
	}
	wdone := make(chan waited, 1)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		wl, o := h.acquire(wctx, h.probes, "waiter", "nemesis", name, 15*time.Second)
		if wl == nil {
			wdone <- waited{o, errors.New(o.Err)}
			return
		}
		// Hold until told, then check the lock is still ours.
		<-wctx.Done()
		held := wl.Err() == nil
		h.release(wl, o)
		if !held {
			wdone <- waited{o, fmt.Errorf("the waiter's lock was lost: %v", wl.Err())}
			return
		}
		wdone <- waited{o, nil}
	}()
	// Wait until the waiter is queued behind the releaser.
	for i := 0; i < 100; i++ {
		var q bool
		h.Hist.update(func() {
			for _, a := range h.Hist.Acquires {
				q = q || a.Name == name && a.Client == "waiter" && !a.Queued.IsZero()
			}
		})
		if q {
			break
		}
		n.sleep(ctx, 30*time.Millisecond)
	}
	in.Start = time.Now()
	n.lossy.Set(netfault.Fault{LoseReplies: true})
	h.Hist.update(func() { op.End = time.Now() })
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	rerr := l.Release(rctx)
	took := time.Since(in.Start)
	cancel()
	n.lossy.Set(netfault.Fault{})
	in.Heal = time.Now()
	// The waiter holds now (granted after the first attempt took effect);
	// give the retry's effects time to show, then look.
	n.sleep(ctx, 500*time.Millisecond)
	d, derr := h.probes.base.Describe(ctx, name)
	wcancel()
	w := <-wdone
	var wtoken int64
	h.Hist.update(func() { wtoken = w.op.Token })
	// A release that took at least the releaser's 1 s attempt timeout had
	// its first reply lost and was retried on the other gateway.
	in.Note = fmt.Sprintf("release returned %v after %s; waiter token %d; holder now %d (%v)",
		rerr, took.Round(time.Millisecond), wtoken, d.Token, derr)
	switch {
	case w.err != nil && w.op.Outcome == outGranted:
		in.Violation = "after the retried release: " + w.err.Error()
	case w.op.Outcome != outGranted:
		in.Note += "; waiter not granted: " + w.op.Err
	case derr == nil && d.Token != wtoken:
		in.Violation = fmt.Sprintf("after the retried release the holder's token is %d, not the waiter's %d", d.Token, wtoken)
	}
	if w.op.Outcome == outGranted {
		in.Unavailable = w.op.Complete.Sub(in.Start)
	}
	return nil
}
