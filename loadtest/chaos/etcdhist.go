//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// lockRoot is the prefix of every waiter key (the gateways' default prefix).
var lockRoot = queue.LocksPrefix(shard.DefaultPrefix)

// KeyEvent is the creation or deletion of one waiter key, as the recorder's
// watch delivered it.
type KeyEvent struct {
	// Cluster is the cluster the key lives on.
	Cluster string `json:"cluster"`
	// Name is the lock name (its escaped key segment).
	Name string `json:"name"`
	// Waiter is the waiter id (derived from the request id).
	Waiter string `json:"waiter"`
	// Create is true for the key's creation, false for its deletion.
	Create bool `json:"create"`
	// CreateRev is the key's create revision; ModRev the event's revision.
	CreateRev int64 `json:"createRev"`
	ModRev    int64 `json:"modRev"`
	// Epoch is the shard-map epoch recorded in the waiter's value.
	Epoch uint16 `json:"epoch"`
	// Lease is the key's lease.
	Lease int64 `json:"lease"`
	// Seen is when the recorder received the event: etcd committed it
	// by then.
	Seen time.Time `json:"seen,omitzero"`
}

// ClockSample is one linearizable read of a cluster: its header revision
// and the times around it. A revision above Rev was committed after Invoke;
// one at or below Rev before Complete.
type ClockSample struct {
	Cluster  string    `json:"cluster"`
	Rev      int64     `json:"rev"`
	Invoke   time.Time `json:"invoke"`
	Complete time.Time `json:"complete"`
}

// recorder keeps the etcd revision history of the lock keys of every
// cluster. Its watches start at revision 1 and the compactor never passes
// the revision they have delivered, so the history stays complete.
type recorder struct {
	hist *History

	mu        sync.Mutex
	progress  map[string]int64 // revision delivered, per cluster
	compacted map[string]int64
	gaps      []error
	dels      map[string]map[int64]bool // create revisions of deleted keys, per cluster

	wg sync.WaitGroup
}

func newRecorder(hist *History) *recorder {
	return &recorder{hist: hist, progress: map[string]int64{}, compacted: map[string]int64{}, dels: map[string]map[int64]bool{}}
}

// start follows c until ctx ends.
func (r *recorder) start(ctx context.Context, c *EtcdCluster) {
	r.wg.Add(3)
	go func() { defer r.wg.Done(); r.watch(ctx, c) }()
	go func() { defer r.wg.Done(); r.askProgress(ctx, c) }()
	go func() { defer r.wg.Done(); r.sample(ctx, c) }()
}

func (r *recorder) wait() { r.wg.Wait() }

func (r *recorder) watch(ctx context.Context, c *EtcdCluster) {
	next := int64(1)
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := c.Client.Watch(wctx, lockRoot, clientv3.WithPrefix(), clientv3.WithRev(next),
			clientv3.WithPrevKV(), clientv3.WithProgressNotify())
		for resp := range wch {
			if resp.CompactRevision != 0 {
				r.gap(fmt.Errorf("cluster %s: history compacted at %d before the recorder read past %d", c.Name, resp.CompactRevision, next))
				next = resp.CompactRevision
				break
			}
			if resp.Err() != nil {
				break
			}
			seen := time.Now()
			for _, ev := range resp.Events {
				if ke, ok := keyEvent(c.Name, ev); ok {
					ke.Seen = seen
					r.hist.update(func() { r.hist.Keys = append(r.hist.Keys, ke) })
					if !ke.Create {
						r.noteDeleted(ke)
					}
				}
				next = ev.Kv.ModRevision + 1
			}
			if resp.IsProgressNotify() {
				next = max(next, resp.Header.Revision+1)
			}
			if resp.IsProgressNotify() || len(resp.Events) > 0 {
				r.mu.Lock()
				r.progress[c.Name] = max(r.progress[c.Name], next-1)
				r.mu.Unlock()
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (r *recorder) noteDeleted(ke KeyEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dels[ke.Cluster] == nil {
		r.dels[ke.Cluster] = map[int64]bool{}
	}
	r.dels[ke.Cluster][ke.CreateRev] = true
}

// deleted reports whether the key created at rev on cluster has been
// deleted; such a key never comes back.
func (r *recorder) deleted(cluster string, rev int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dels[cluster][rev]
}

func (r *recorder) gap(err error) {
	r.mu.Lock()
	r.gaps = append(r.gaps, err)
	r.mu.Unlock()
}

func (r *recorder) gapErrors() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.gaps...)
}

// askProgress asks for progress notifications, so the recorder's revision
// moves on while no lock key changes.
func (r *recorder) askProgress(ctx context.Context, c *EtcdCluster) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), time.Second)
		_ = c.Client.RequestProgress(pctx)
		cancel()
	}
}

// sample reads the cluster every 20 ms to tie revisions to real time.
func (r *recorder) sample(ctx context.Context, c *EtcdCluster) {
	for ctx.Err() == nil {
		invoke := time.Now()
		gctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		resp, err := c.Client.Get(gctx, "/leasegate-chaos/clock", clientv3.WithCountOnly())
		cancel()
		if err == nil {
			s := ClockSample{Cluster: c.Name, Rev: resp.Header.Revision, Invoke: invoke, Complete: time.Now()}
			r.hist.update(func() { r.hist.Clock = append(r.hist.Clock, s) })
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// compact compacts c up to the revision the recorder has delivered, so
// watches from older revisions (the gateways' waiters) fail with
// ErrCompacted while the recorded history stays whole.
func (r *recorder) compact(ctx context.Context, c *EtcdCluster) error {
	r.mu.Lock()
	rev, done := r.progress[c.Name], r.compacted[c.Name]
	r.mu.Unlock()
	if rev <= done {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := c.Client.Compact(cctx, rev); err != nil {
		return err
	}
	r.mu.Lock()
	r.compacted[c.Name] = max(r.compacted[c.Name], rev)
	r.mu.Unlock()
	return nil
}

// keyEvent decodes a watch event on a waiter key.
func keyEvent(cluster string, ev *clientv3.Event) (KeyEvent, bool) {
	rest := strings.TrimPrefix(string(ev.Kv.Key), lockRoot)
	name, waiter, ok := strings.Cut(rest, "/")
	if !ok {
		return KeyEvent{}, false
	}
	ke := KeyEvent{Cluster: cluster, Name: name, Waiter: waiter, ModRev: ev.Kv.ModRevision}
	kv := ev.Kv
	if ev.Type == mvccpb.DELETE {
		if ev.PrevKv == nil {
			return KeyEvent{}, false
		}
		kv = ev.PrevKv
	} else if !ev.IsCreate() {
		return KeyEvent{}, false // waiter values are never rewritten
	}
	ke.Create = ev.Type == mvccpb.PUT
	ke.CreateRev, ke.Lease = kv.CreateRevision, kv.Lease
	ke.Epoch, _ = queue.ValueEpoch(kv.Value) // 0 for a value that is not a waiter's
	return ke, true
}

// revClock answers real-time bounds for the revisions of one cluster.
type revClock struct {
	samples []ClockSample // by invoke time
	sufMin  []int64       // sufMin[i] = min Rev of samples[i:]
}

func newRevClock(samples []ClockSample, cluster string) revClock {
	var c revClock
	for _, s := range samples {
		if s.Cluster == cluster {
			c.samples = append(c.samples, s)
		}
	}
	sort.Slice(c.samples, func(i, j int) bool { return c.samples[i].Invoke.Before(c.samples[j].Invoke) })
	c.sufMin = make([]int64, len(c.samples))
	for i := len(c.samples) - 1; i >= 0; i-- {
		c.sufMin[i] = c.samples[i].Rev
		if i+1 < len(c.samples) {
			c.sufMin[i] = min(c.sufMin[i], c.sufMin[i+1])
		}
	}
	return c
}

// committedAfter is a time before which revision rev was surely not
// committed: the invoke of the latest read that returned a lower revision
// (a linearizable read invoked after rev's commit returns rev or more).
// Zero when no read did.
func (c revClock) committedAfter(rev int64) time.Time {
	// The latest sample with Rev < rev is the last i with sufMin[i] < rev;
	// sufMin does not decrease.
	i := sort.Search(len(c.sufMin), func(i int) bool { return c.sufMin[i] >= rev })
	if i == 0 {
		return time.Time{}
	}
	return c.samples[i-1].Invoke
}

// committedBy is a time by which revision rev was surely committed: the
// earliest completion of a read that returned rev or more. Zero when no
// read did.
func (c revClock) committedBy(rev int64) time.Time {
	var t time.Time
	for _, s := range c.samples {
		if s.Rev >= rev && (t.IsZero() || s.Complete.Before(t)) {
			t = s.Complete
		}
	}
	return t
}
