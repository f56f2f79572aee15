//go:build linux

package chaos

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/netfault"
)

// Fault kinds, in the order the quick mode cycles through them.
const (
	kindLeaderKill       = "leader-kill"
	kindFollowerKill     = "follower-kill"
	kindLeaderPause      = "leader-pause"
	kindMemberBlackhole  = "member-blackhole"
	kindLinkDelay        = "link-delay"
	kindLinkDrop         = "link-drop"
	kindHolderPause      = "holder-pause"
	kindHolderKill       = "holder-kill"
	kindGatewayKill      = "gateway-kill"
	kindCompaction       = "compaction"
	kindQuorumLoss       = "quorum-loss"
	kindReshard          = "reshard"
	kindReleaseReplyLost = "release-reply-lost"
	kindKeepaliveDelay   = "keepalive-delay"
	kindGatewayShutdown  = "gateway-shutdown"
	kindStreamResume     = "stream-resume"
	kindLeasectlHup      = "leasectl-hup"
	kindLeasectlKill     = "leasectl-kill"
	kindEvict            = "evict"
)

// Kinds lists every fault kind.
var Kinds = []string{
	kindLeaderKill, kindFollowerKill, kindLeaderPause, kindMemberBlackhole, kindLinkDelay, kindLinkDrop,
	kindHolderPause, kindHolderKill, kindGatewayKill, kindCompaction, kindQuorumLoss, kindReshard,
	kindReleaseReplyLost, kindKeepaliveDelay, kindGatewayShutdown, kindStreamResume, kindLeasectlHup,
	kindLeasectlKill, kindEvict,
}

// nemesis injects faults one at a time and heals each before the next.
type nemesis struct {
	h     *Harness
	rng   *mrand.Rand
	rngMu sync.Mutex // for draws from goroutines of one injection

	lossy    *netfault.Link // a second front link to g0, for lost release replies
	releaser *sdk
	// pinned[i] reaches gateway i only; first[i] reaches gateway i first
	// and the others after it; patient[i] reaches gateway i only and waits
	// longer for each answer.
	pinned, first, patient []*sdk
	resumer                *sdk
	evictor                *sdk // the operator's client of the evict injection
}

func newNemesis(h *Harness, seed uint64) (*nemesis, error) {
	n := &nemesis{h: h, rng: mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	var err error
	if n.lossy, err = netfault.New("g0-lossy", h.Gateways[0].Addr); err != nil {
		return nil, err
	}
	h.addCloser(n.lossy.Close)
	n.releaser, err = h.newSDK("releaser", []string{n.lossy.URL(), h.Gateways[1].Front.URL()},
		client.WithRequestTimeout(time.Second))
	if err != nil {
		return nil, err
	}
	for i, g := range h.Gateways {
		p, err := h.newSDK("nemesis-"+g.Name, []string{g.Front.URL()})
		if err != nil {
			return nil, err
		}
		eps := []string{g.Front.URL()}
		for j, o := range h.Gateways {
			if j != i {
				eps = append(eps, o.Front.URL())
			}
		}
		f, err := h.newSDK("nemesis-"+g.Name+"-first", eps)
		if err != nil {
			return nil, err
		}
		pt, err := h.newSDK("nemesis-"+g.Name+"-patient", []string{g.Front.URL()}, client.WithRequestTimeout(4*time.Second))
		if err != nil {
			return nil, err
		}
		n.pinned, n.first, n.patient = append(n.pinned, p), append(n.first, f), append(n.patient, pt)
	}
	if n.resumer, err = h.newSDK("nemesis-resume", nil); err != nil {
		return nil, err
	}
	if n.evictor, err = h.newSDK("nemesis-evictor", nil); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *nemesis) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rngInt64N(int64(hi-lo)+1))
}

// pickCluster picks a cluster that owns names now.
func (n *nemesis) pickCluster() *EtcdCluster {
	in := n.h.clustersInMap()
	return n.h.Cluster(in[n.rng.IntN(len(in))])
}

// run injects kind and returns its record. Errors of the harness itself
// (a member that does not come back) are returned.
func (n *nemesis) run(ctx context.Context, kind string) (*Injection, error) {
	in := &Injection{Kind: kind, Unavailable: -1}
	var err error
	switch kind {
	case kindLeaderKill, kindFollowerKill, kindLeaderPause:
		err = n.memberFault(ctx, in)
	case kindMemberBlackhole:
		err = n.blackhole(ctx, in)
	case kindLinkDelay, kindLinkDrop:
		err = n.linkFault(ctx, in)
	case kindHolderPause, kindHolderKill:
		err = n.holderFault(ctx, in)
	case kindGatewayKill:
		err = n.gatewayKill(ctx, in)
	case kindCompaction:
		err = n.compaction(ctx, in)
	case kindQuorumLoss:
		err = n.quorumLoss(ctx, in)
	case kindReshard:
		err = n.reshard(ctx, in)
	case kindReleaseReplyLost:
		err = n.releaseReplyLost(ctx, in)
	case kindKeepaliveDelay:
		err = n.keepaliveDelay(ctx, in)
	case kindGatewayShutdown:
		err = n.gatewayShutdown(ctx, in)
	case kindStreamResume:
		err = n.streamResume(ctx, in)
	case kindLeasectlHup, kindLeasectlKill:
		err = n.leasectlSignal(ctx, in)
	case kindEvict:
		err = n.evict(ctx, in)
	default:
		err = fmt.Errorf("unknown fault kind %q", kind)
	}
	if err == nil {
		err = n.awaitHealthy(ctx)
	}
	in.End = time.Now()
	n.h.Hist.addInjection(in)
	return in, err
}

// awaitHealthy waits until every cluster has a leader and every member
// answers.
func (n *nemesis) awaitHealthy(ctx context.Context) error {
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, c := range n.h.Clusters {
		if err := c.awaitHealthy(hctx); err != nil {
			return err
		}
	}
	return nil
}

// availability probes every cluster in clusters (all in the map when
// empty) from start until the first grant on each, at most window, and
// records the slowest first grant.
func (n *nemesis) availability(ctx context.Context, in *Injection, clusters []string, start time.Time, window time.Duration) <-chan struct{} {
	if len(clusters) == 0 {
		clusters = n.h.clustersInMap()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		worst := time.Duration(0)
		for _, c := range clusters {
			if !slices.Contains(n.h.clustersInMap(), c) {
				continue
			}
			r := n.h.probe(ctx, c, start, start.Add(window), true)
			if r.First < 0 {
				worst = -1
				break
			}
			worst = max(worst, r.First)
		}
		in.Unavailable = worst
	}()
	return done
}

func (n *nemesis) memberFault(ctx context.Context, in *Injection) error {
	c := n.pickCluster()
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	m := leader
	if in.Kind == kindFollowerKill {
		var fs []*Member
		for _, x := range c.Members {
			if x != leader {
				fs = append(fs, x)
			}
		}
		m = fs[n.rng.IntN(len(fs))]
	}
	in.Target, in.Clusters = m.Name, []string{c.Name}
	in.Start = time.Now()
	if in.Kind == kindLeaderPause {
		if err := m.Pause(); err != nil {
			return err
		}
	} else {
		m.Kill()
	}
	probed := n.availability(ctx, in, in.Clusters, in.Start, 15*time.Second)
	if in.Kind == kindLeaderPause {
		// Past the election timeout: the others elect a new leader while
		// the old one is frozen, then it wakes up as a stale leader.
		n.sleep(ctx, time.Duration(n.h.cfg.ElectionMs)*time.Millisecond*5/2)
		err = m.Resume()
	} else {
		n.sleep(ctx, n.between(1500*time.Millisecond, 3*time.Second))
		err = m.Restart()
	}
	in.Heal = time.Now()
	<-probed
	return err
}

func (n *nemesis) blackhole(ctx context.Context, in *Injection) error {
	c := n.pickCluster()
	m := c.Members[n.rng.IntN(len(c.Members))]
	in.Target, in.Clusters = m.Name, []string{c.Name}
	links := []*netfault.Link{m.Peer}
	for _, g := range n.h.Gateways {
		links = append(links, g.Etcd[m.Name])
	}
	in.Start = time.Now()
	for _, l := range links {
		l.Set(netfault.Fault{Blackhole: true})
	}
	probed := n.availability(ctx, in, in.Clusters, in.Start, 20*time.Second)
	n.sleep(ctx, 3*time.Second)
	for _, l := range links {
		l.Set(netfault.Fault{})
	}
	in.Heal = time.Now()
	<-probed
	return nil
}

func (n *nemesis) linkFault(ctx context.Context, in *Injection) error {
	var links []*netfault.Link
	if n.rng.IntN(2) == 0 {
		g := n.h.Gateways[n.rng.IntN(len(n.h.Gateways))]
		in.Target = g.Name + "->etcd"
		for _, l := range g.Etcd {
			links = append(links, l)
		}
	} else {
		in.Target = "clients->gateways"
		for _, g := range n.h.Gateways {
			links = append(links, g.Front)
		}
	}
	f := netfault.Fault{Delay: n.between(50*time.Millisecond, 200*time.Millisecond), Jitter: 30 * time.Millisecond}
	if in.Kind == kindLinkDrop {
		f = netfault.Fault{DropRate: 0.01 + 0.04*n.rng.Float64()}
	}
	in.Note = fmt.Sprintf("delay %s ±%s, drop %.3f", f.Delay, f.Jitter, f.DropRate)
	in.Start = time.Now()
	for _, l := range links {
		l.Set(f)
	}
	probed := n.availability(ctx, in, nil, in.Start, 15*time.Second)
	n.sleep(ctx, 3*time.Second)
	for _, l := range links {
		l.Set(netfault.Fault{})
	}
	in.Heal = time.Now()
	<-probed
	return nil
}

func (n *nemesis) gatewayKill(ctx context.Context, in *Injection) error {
	g := n.h.Gateways[n.rng.IntN(len(n.h.Gateways))]
	in.Target = g.Name
	in.Start = time.Now()
	g.Kill()
	probed := n.availability(ctx, in, nil, in.Start, 15*time.Second)
	n.sleep(ctx, n.between(time.Second, 2*time.Second))
	err := g.Start()
	in.Heal = time.Now()
	<-probed
	return err
}

func (n *nemesis) compaction(ctx context.Context, in *Injection) error {
	in.Target = "all clusters, every 200ms"
	in.Start = time.Now()
	probed := n.availability(ctx, in, nil, in.Start, 15*time.Second)
	compactions := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		for _, c := range n.h.Clusters {
			if n.h.rec.compact(ctx, c) == nil {
				compactions++
			}
		}
		n.sleep(ctx, 200*time.Millisecond)
	}
	in.Heal = time.Now()
	in.Note = fmt.Sprintf("%d compactions", compactions)
	<-probed
	return nil
}

func (n *nemesis) quorumLoss(ctx context.Context, in *Injection) error {
	c := n.pickCluster()
	victims := slices.Clone(c.Members)
	n.rng.Shuffle(len(victims), func(i, j int) { victims[i], victims[j] = victims[j], victims[i] })
	victims = victims[:2]
	in.Target, in.Clusters = victims[0].Name+"+"+victims[1].Name, []string{c.Name}
	in.Start = time.Now()
	for _, m := range victims {
		m.Kill()
	}
	// While the cluster is down, names of the other clusters must still be
	// granted and names of this one must not be.
	outage := in.Start.Add(4 * time.Second)
	results := map[string]probeResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range n.h.clustersInMap() {
		wg.Go(func() {
			r := n.h.probe(ctx, name, in.Start, outage, false)
			mu.Lock()
			results[name] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	var errs []error
	for _, m := range victims {
		if err := m.Restart(); err != nil {
			errs = append(errs, err)
		}
	}
	in.Heal = time.Now()
	r := n.h.probe(ctx, c.Name, in.Heal, in.Heal.Add(20*time.Second), true)
	if r.First >= 0 {
		in.Unavailable = in.Heal.Sub(in.Start) + r.First
	}
	in.Note = fmt.Sprintf("recovered %s after restart;", r.First)
	for name, pr := range results {
		in.Note += fmt.Sprintf(" %s during outage: %d granted, %d failed (%d after >2s);", name, pr.OK, pr.Failed, pr.SlowFail)
		switch {
		case name == c.Name && pr.OK > 0:
			in.Violation = fmt.Sprintf("cluster %s without quorum granted %d probes", name, pr.OK)
		case name != c.Name && pr.OK == 0:
			in.Violation = fmt.Sprintf("healthy cluster %s granted nothing while %s was down", name, c.Name)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}
