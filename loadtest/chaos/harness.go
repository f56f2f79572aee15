//go:build linux

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/leasegate/leasegate/shard"
)

// Harness is one running system under test: etcd clusters, gateways, the
// register, the recorder and the links between them. Close ends every
// process it started.
type Harness struct {
	cfg      Config
	bin      string // the leasegate binary
	leasectl string // the leasectl binary
	member   string // the etcdmember binary
	python   string // the Python interpreter; "" skips the Python actor
	// pythonSDK is the Python SDK's directory (sdk/python), the Python
	// workers' PYTHONPATH.
	pythonSDK string
	out       string
	dataDir   string
	logf      func(format string, args ...any)
	maxTTL    atomic.Int64 // the longest lock TTL asked for (noteTTL)

	// Clusters are the etcd clusters, c0 first (the home of the shard map).
	Clusters []*EtcdCluster
	// Gateways are the gateway processes.
	Gateways []*Gateway
	// Reg is the fenced register.
	Reg *Register
	// Hist is the recorded history.
	Hist *History

	rec   *recorder
	stale *stalePool
	mono  monoClock
	ports *ports

	mu         sync.Mutex
	initial    map[string]string
	closers    []func()
	inMap      []string // clusters names are hashed over now
	epoch      uint16
	names      []string // the workers' contended names
	semaphores []semaphore
	holderNo   int
	leasectlNo int
	probeNo    int
	errs       []error  // the harness's own failures, reported as history violations
	crashes    []string // processes of the system that exited on their own

	probes *sdk // the availability probes' and the nemesis's clients
}

// Binaries are the programs a run starts, built from this module.
type Binaries struct {
	// Leasegate runs the gateways.
	Leasegate string
	// Leasectl runs the leasectl holders.
	Leasectl string
	// EtcdMember runs one etcd member (loadtest/chaos/etcdmember).
	EtcdMember string
	// Python runs the Python workers (python.go); empty skips them.
	Python string
	// PythonSDK is the Python SDK's directory (sdk/python).
	PythonSDK string
}

// Start brings up 2 clusters × 3 members and 2 gateways, with out the
// output directory. ctx bounds the recorder.
func Start(ctx context.Context, cfg Config, bins Binaries, out string, logf func(string, ...any)) (_ *Harness, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Harness{cfg: cfg, bin: bins.Leasegate, leasectl: bins.Leasectl, member: bins.EtcdMember, python: bins.Python, pythonSDK: bins.PythonSDK, out: out, dataDir: filepath.Join(out, "data"), logf: logf,
		Hist: &History{}, initial: map[string]string{}, epoch: shard.MinEpoch, stale: &stalePool{}, mono: newMonoClock(), ports: newPorts()}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	if err := os.MkdirAll(filepath.Join(out, "logs"), 0o755); err != nil {
		return nil, err
	}
	h.rec = newRecorder(h.Hist)
	// Clusters start concurrently: each member waits for a quorum.
	names := []string{"c0", "c1"}
	h.Clusters = make([]*EtcdCluster, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { h.Clusters[i], errs[i] = newEtcdCluster(h, n, 3) })
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	for _, c := range h.Clusters {
		h.rec.start(ctx, c)
		h.inMap = append(h.inMap, c.Name)
	}
	if h.Reg, err = newRegister(h.Hist); err != nil {
		return nil, err
	}
	h.addCloser(h.Reg.Close)
	for i := range 2 {
		g, err := newGateway(h, fmt.Sprintf("g%d", i))
		if err != nil {
			return nil, err
		}
		h.Gateways = append(h.Gateways, g)
	}
	h.names = h.pickNames()
	h.semaphores = h.pickSemaphores()
	if h.probes, err = h.newSDK("probe", nil); err != nil {
		return nil, err
	}
	return h, nil
}

// harnessErr records a failure of the harness itself (a child that spoke
// nonsense, clocks that disagree); the run reports it as a violation of
// history-complete, since the history cannot be trusted.
func (h *Harness) harnessErr(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
}

// crashed records a process of the system under test that exited without
// the harness asking it to: a violation of its own, whatever the other
// checkers make of what followed.
func (h *Harness) crashed(what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.crashes = append(h.crashes, what)
}

// crashReports returns the crashes recorded so far.
func (h *Harness) crashReports() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.crashes)
}

func (h *Harness) harnessErrors() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.errs)
}

func (h *Harness) setInitial(cluster, initial string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.initial[cluster] = initial
}

func (h *Harness) clusterInitial(cluster string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.initial[cluster]
}

// addCloser registers fn to run at Close, in reverse order.
func (h *Harness) addCloser(fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closers = append(h.closers, fn)
}

// Close kills every process and closes every link. It is idempotent.
func (h *Harness) Close() {
	h.mu.Lock()
	cs := h.closers
	h.closers = nil
	h.mu.Unlock()
	for _, fn := range slices.Backward(cs) {
		fn()
	}
}

// Cluster returns the cluster called name.
func (h *Harness) Cluster(name string) *EtcdCluster {
	for _, c := range h.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// frontURLs are the client→gateway links.
func (h *Harness) frontURLs() []string {
	var out []string
	for _, g := range h.Gateways {
		out = append(out, g.Front.URL())
	}
	return out
}

// ring is the ring of the map in force.
func (h *Harness) ring() *shard.Ring {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, _ := shard.NewRing(h.inMap)
	return r
}

// clustersInMap lists the clusters names are hashed over now.
func (h *Harness) clustersInMap() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.inMap)
}

// pickNames chooses the contended names: NamesPerCluster per cluster under
// the initial map. Names use only characters the engine does not escape,
// so a name is its own key segment.
func (h *Harness) pickNames() []string {
	r := h.ring()
	per := map[string]int{}
	var out []string
	for i := 0; len(out) < h.cfg.NamesPerCluster*len(h.Clusters); i++ {
		n := fmt.Sprintf("lock-%02d", i)
		c := r.Locate(n)
		if per[c] < h.cfg.NamesPerCluster {
			per[c]++
			out = append(out, n)
		}
	}
	return out
}

// freshName returns an unused name that cluster owns under the map in
// force, or "" when cluster owns no names now.
func (h *Harness) freshName(prefix, cluster string) string {
	r := h.ring()
	if !slices.Contains(h.clustersInMap(), cluster) {
		return ""
	}
	for {
		h.mu.Lock()
		h.probeNo++
		n := fmt.Sprintf("%s-%05d", prefix, h.probeNo)
		h.mu.Unlock()
		if r.Locate(n) == cluster {
			return n
		}
	}
}
