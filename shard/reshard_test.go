package shard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/embedetcd"
	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/queue"
)

// member is a cluster of the shard map backed by a real etcd member.
func member(name string, c *etcdtest.Cluster) Cluster {
	return Cluster{Name: name, Endpoints: []string{c.Endpoint()}}
}

// storeAt stores the first map, at epoch, over one cluster, and moves the
// cluster's meta/epoch there: the state a deployment reaches after
// epoch-1 changes.
func storeAt(t *testing.T, store *Store, prefix string, epoch uint16, c Cluster, cli *clientv3.Client) Snapshot {
	t.Helper()
	ctx := testCtx(t)
	if epoch > MinEpoch {
		if err := BumpEpoch(ctx, cli, prefix, MinEpoch, epoch); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := store.CompareAndSwap(ctx, Snapshot{}, Map{Epoch: epoch, Clusters: []Cluster{c}})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func epochOn(t *testing.T, cli *clientv3.Client, prefix string) uint16 {
	t.Helper()
	e, err := ReadEpoch(testCtx(t), cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEpochLimit(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	a, b := etcdtest.Start(t), etcdtest.Start(t)
	ca, cb := member("a", a), member("b", b)
	cliA, cliB := a.Client(), b.Client()
	const prefix = "/limit"
	store := NewStore(cliA, prefix)
	before := storeAt(t, store, prefix, MaxJSONSafeEpoch, ca, cliA)
	rs := &Resharder{Store: store, Prefix: prefix, Names: lockNames{}}

	// The default limit: no change takes the epoch past 31, and the refusal
	// says where the map is, what the limit is and why.
	_, err := rs.Apply(ctx, []Cluster{ca, cb})
	if !errors.Is(err, ErrEpochLimit) {
		t.Fatalf("Apply(add b) at epoch %d = %v; want ErrEpochLimit", MaxJSONSafeEpoch, err)
	}
	for _, want := range []string{"at epoch 31", "limit is 31", "epoch 32 is refused", "2^53", "JSON numbers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := rs.BumpEpoch(ctx); !errors.Is(err, ErrEpochLimit) {
		t.Fatalf("BumpEpoch at epoch %d = %v; want ErrEpochLimit", MaxJSONSafeEpoch, err)
	}
	// Refused before step 1: no pending map, no cluster bumped.
	if got, err := store.Load(ctx); err != nil || !reflect.DeepEqual(got, before) {
		t.Fatalf("stored map after the refusals = %+v, %v; want it untouched: %+v", got, err, before)
	}
	if ea, eb := epochOn(t, cliA, prefix), epochOn(t, cliB, prefix); ea != MaxJSONSafeEpoch || eb != MinEpoch {
		t.Fatalf("cluster epochs after the refusals: a %d, b %d; want %d and %d, untouched", ea, eb, MaxJSONSafeEpoch, MinEpoch)
	}

	rs.EpochLimit = MaxEpoch + 1
	if _, err := rs.Apply(ctx, []Cluster{ca, cb}); !errors.Is(err, ErrInvalidEpoch) || !strings.Contains(err.Error(), "32768 out of range [1, 32767]") {
		t.Fatalf("Apply with EpochLimit %d = %v; want ErrInvalidEpoch naming the range", MaxEpoch+1, err)
	}

	// An operator who opts in gets exactly the epochs allowed.
	rs.EpochLimit = MaxJSONSafeEpoch + 1
	m, err := rs.Apply(ctx, []Cluster{ca, cb})
	if err != nil || m.Epoch != MaxJSONSafeEpoch+1 {
		t.Fatalf("Apply(add b) with EpochLimit %d = epoch %d, %v; want epoch %d", rs.EpochLimit, m.Epoch, err, MaxJSONSafeEpoch+1)
	}
	if ea, eb := epochOn(t, cliA, prefix), epochOn(t, cliB, prefix); ea != 32 || eb != 32 {
		t.Fatalf("cluster epochs after the change: a %d, b %d; want 32 on both", ea, eb)
	}
	if _, err := rs.Sweep(ctx, 0); err != nil {
		t.Fatal(err)
	}
	_, err = rs.Apply(ctx, []Cluster{cb})
	if !errors.Is(err, ErrEpochLimit) || !strings.Contains(err.Error(), "limit is 32") || !strings.Contains(err.Error(), "raise the limit") {
		t.Fatalf("Apply(remove a) at epoch 32 with EpochLimit 32 = %v; want ErrEpochLimit naming limit 32", err)
	}
	if _, err := rs.BumpEpoch(ctx); !errors.Is(err, ErrEpochLimit) || !strings.Contains(err.Error(), "limit is 32") {
		t.Fatalf("BumpEpoch at epoch 32 with EpochLimit 32 = %v; want ErrEpochLimit naming limit 32", err)
	}
}

// A change left half done past the limit (announced by a run that was
// allowed more) is resumed only by a run allowed as much.
func TestEpochLimitHoldsForAPendingChange(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	a := etcdtest.Start(t)
	ca, cli := member("a", a), a.Client()
	const prefix = "/limit-pending"
	store := NewStore(cli, prefix)
	snap := storeAt(t, store, prefix, MaxJSONSafeEpoch, ca, cli)
	next := Map{Epoch: MaxJSONSafeEpoch + 1, Clusters: []Cluster{ca}}
	if _, err := store.CompareAndSwap(ctx, snap, withPending(snap.Map, next)); err != nil {
		t.Fatal(err)
	}
	rs := &Resharder{Store: store, Prefix: prefix}
	_, err := rs.Apply(ctx, next.Clusters)
	if !errors.Is(err, ErrEpochLimit) || !strings.Contains(err.Error(), "change to epoch 32 is pending") {
		t.Fatalf("Apply resuming a pending epoch 32 = %v; want ErrEpochLimit that names the pending change", err)
	}
	rs.EpochLimit = 32
	if m, err := rs.Apply(ctx, next.Clusters); err != nil || m.Epoch != 32 || m.Pending != nil {
		t.Fatalf("Apply with EpochLimit 32 = %+v, %v; want epoch 32 in force", m, err)
	}
}

func TestMaxJSONSafeEpoch(t *testing.T) {
	// Every token of the last safe epoch survives a trip through a double;
	// the first token of the next epoch does not.
	last := queue.Token(MaxJSONSafeEpoch, 1<<queue.EpochShift-1)
	if last != 1<<53-1 || int64(float64(last)) != last {
		t.Errorf("largest token of epoch %d = %d; want 2^53-1, exact as a double", MaxJSONSafeEpoch, last)
	}
	first := queue.Token(MaxJSONSafeEpoch+1, 1)
	if int64(float64(first)) == first {
		t.Errorf("token %d of epoch %d is exact as a double; want it past 2^53", first, MaxJSONSafeEpoch+1)
	}
}

// shard states the engine's constants it needs without importing it; they
// must stay equal.
func TestDefaultsMatchTheEngine(t *testing.T) {
	if MaxEpoch != queue.MaxEpoch {
		t.Errorf("MaxEpoch = %d; want queue.MaxEpoch %d", MaxEpoch, queue.MaxEpoch)
	}
	if DefaultPrefix != queue.DefaultPrefix {
		t.Errorf("DefaultPrefix = %q; want queue.DefaultPrefix %q", DefaultPrefix, queue.DefaultPrefix)
	}
}

// grants takes and releases locks the way a gateway does: routed by the
// map in force and, when a cluster refuses the epoch, again once a newer
// map is in force.
type grants struct {
	t   *testing.T
	r   *testRouter
	seq atomic.Int64
}

func (g *grants) take(name string) queue.Grant {
	g.t.Helper()
	ctx := testCtx(g.t)
	for attempt := 0; ; attempt++ {
		eng, epoch := g.r.route(name)
		res, err := eng.TryAcquire(ctx, queue.AcquireRequest{
			Name: name, TTL: 10 * time.Second, ClientID: "test",
			RequestID: fmt.Sprintf("req-%d", g.seq.Add(1)),
			Epoch:     epoch, Guards: []clientv3.Cmp{EpochCompare(g.r.prefix, epoch)},
		})
		if errors.Is(err, queue.ErrGuardFailed) && attempt < 3 {
			if err := g.r.AwaitNewer(ctx, epoch); err != nil {
				g.t.Fatal(err)
			}
			continue
		}
		if err != nil || !res.Acquired {
			g.t.Fatalf("TryAcquire(%q) = %+v, %v; want it granted", name, res, err)
		}
		if _, err := eng.Release(ctx, res.Grant.Handle, res.Grant.Token()); err != nil {
			g.t.Fatal(err)
		}
		return res.Grant
	}
}

// testRouter routes names as package locks does for a gateway, by the ring
// of the stored map in force, with one lock engine per cluster (shard's
// tests cannot import locks, which imports shard).
type testRouter struct {
	t       *testing.T
	store   *Store
	prefix  string
	mu      sync.Mutex
	m       Map
	engines map[string]*queue.Engine
}

// route returns the engine of the cluster that owns name under the map in
// force, and the map's epoch.
func (r *testRouter) route(name string) (*queue.Engine, uint16) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	ring, err := r.m.Ring()
	if err != nil {
		r.t.Fatal(err)
	}
	owner := ring.Locate(name)
	if e, ok := r.engines[owner]; ok {
		return e, r.m.Epoch
	}
	c, _ := r.m.Cluster(owner)
	cli, err := DialCluster(c.Name, c.Endpoints)
	if err != nil {
		r.t.Fatal(err)
	}
	qc := queue.DefaultConfig()
	qc.Prefix = r.prefix
	e, err := queue.New(cli, qc)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { e.Close(); cli.Close() })
	r.engines[owner] = e
	return e, r.m.Epoch
}

// Map returns the map in force.
func (r *testRouter) Map() Map {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m
}

// AwaitNewer reloads the stored map until one newer than epoch is in force.
func (r *testRouter) AwaitNewer(ctx context.Context, epoch uint16) error {
	for {
		snap, err := r.store.Load(ctx)
		if err != nil {
			return err
		}
		if snap.Map.Epoch > epoch {
			r.mu.Lock()
			r.m = snap.Map
			r.mu.Unlock()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lockNames lists lock names by the lock engine's key layout, as
// locks.Names does for the gateway's resharder.
type lockNames struct{}

func (lockNames) ListNames(ctx context.Context, cli *clientv3.Client, prefix string) ([]string, error) {
	return queue.ListNames(ctx, cli, prefix)
}

// nameOn returns a lock name the ring puts on cluster.
func nameOn(t *testing.T, clusters []string, cluster string) string {
	t.Helper()
	ring, err := NewRing(clusters)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if n := fmt.Sprintf("job-%d", i); ring.Locate(n) == cluster {
			return n
		}
	}
}

func newTestRouter(t *testing.T, home *clientv3.Client, initial Map, prefix string) *testRouter {
	t.Helper()
	store := NewStore(home, prefix)
	snap, err := store.Load(testCtx(t))
	if errors.Is(err, ErrNoMap) {
		snap, err = store.CompareAndSwap(testCtx(t), Snapshot{}, initial)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &testRouter{t: t, store: store, prefix: prefix, m: snap.Map, engines: map[string]*queue.Engine{}}
}

func TestBumpEpoch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	a, b := etcdtest.Start(t), etcdtest.Start(t)
	ca, cb := member("a", a), member("b", b)
	cliA, cliB := a.Client(), b.Client()
	const prefix = "/bump"
	initial := Map{Epoch: MinEpoch, Clusters: []Cluster{ca, cb}}
	r := newTestRouter(t, cliA, initial, prefix)
	g := &grants{t: t, r: r}
	onA, onB := nameOn(t, []string{"a", "b"}, "a"), nameOn(t, []string{"a", "b"}, "b")

	// Some history on both clusters. b's revisions run ahead of a's, so the
	// highest token is b's: after the bump even a's low revisions beat it.
	var highest int64
	for i := range 8 {
		name := onB
		if i%4 == 0 {
			name = onA
		}
		highest = max(highest, g.take(name).Token())
	}

	var progress []string
	rs := &Resharder{Store: NewStore(cliA, prefix), Prefix: prefix,
		Progress: func(f string, args ...any) { progress = append(progress, fmt.Sprintf(f, args...)) }}
	m, err := rs.BumpEpoch(ctx)
	want := Map{Epoch: 2, Clusters: []Cluster{ca, cb}}
	if err != nil || !reflect.DeepEqual(m, want) {
		t.Fatalf("BumpEpoch = %+v, %v; want %+v: same clusters, nothing pending or draining", m, err, want)
	}
	if stored, err := rs.Store.Load(ctx); err != nil || !reflect.DeepEqual(stored.Map, want) {
		t.Fatalf("stored map = %+v, %v; want %+v", stored.Map, err, want)
	}
	for name, cli := range map[string]*clientv3.Client{"a": cliA, "b": cliB} {
		if e := epochOn(t, cli, prefix); e != 2 {
			t.Errorf("cluster %s at epoch %d after the bump; want 2", name, e)
		}
	}
	// Steps 1 to 3 in order: announced, every cluster bumped, then in force.
	wantProgress := []string{
		`epoch 2 announced as pending (clusters ["a" "b"])`,
		`cluster "a" epoch 1 → 2`,
		`cluster "b" epoch 1 → 2`,
		`epoch 2 in force; no name moved`,
	}
	if !reflect.DeepEqual(progress, wantProgress) {
		t.Errorf("BumpEpoch progress = %q; want %q", progress, wantProgress)
	}

	// After the bump every grant, on either cluster, is above every token
	// issued before it, and the router routes by epoch 2.
	for _, name := range []string{onA, onB} {
		gr := g.take(name)
		if gr.Epoch != 2 || gr.Token() <= highest {
			t.Errorf("grant of %q after the bump: token %d (epoch %d); want epoch 2 and above %d, the highest before", name, gr.Token(), gr.Epoch, highest)
		}
	}
	if e := r.Map().Epoch; e != 2 {
		t.Errorf("router routes by epoch %d after granting under the bump; want 2", e)
	}
}

func TestBumpEpochRefusesAndResumes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	a, b := etcdtest.Start(t), etcdtest.Start(t)
	ca, cb := member("a", a), member("b", b)
	cliA, cliB := a.Client(), b.Client()
	const prefix = "/bump-resume"
	store := NewStore(cliA, prefix)
	snap := storeAt(t, store, prefix, MinEpoch, ca, cliA)
	rs := &Resharder{Store: store, Prefix: prefix, Names: lockNames{}}

	// A resharding is pending: a bump does not hijack it.
	if _, err := store.CompareAndSwap(ctx, snap, withPending(snap.Map, Map{Epoch: 2, Clusters: []Cluster{ca, cb}})); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.BumpEpoch(ctx); err == nil || !strings.Contains(err.Error(), `pending change to clusters ["a" "b"]`) {
		t.Fatalf("BumpEpoch with a resharding pending = %v; want a refusal naming it", err)
	}
	// Finished, the resharding drains: a bump waits for the sweep.
	if _, err := rs.Apply(ctx, []Cluster{ca, cb}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.BumpEpoch(ctx); err == nil || !strings.Contains(err.Error(), "still draining") {
		t.Fatalf("BumpEpoch while draining = %v; want a refusal", err)
	}
	m, err := rs.Sweep(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}

	// A bump interrupted after step 2 reached one cluster: the next run
	// finishes it instead of starting another.
	snap, err = store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CompareAndSwap(ctx, snap, withPending(m, Map{Epoch: 3, Clusters: m.Clusters})); err != nil {
		t.Fatal(err)
	}
	if err := BumpEpoch(ctx, cliB, prefix, 2, 3); err != nil {
		t.Fatal(err)
	}
	m, err = rs.BumpEpoch(ctx)
	if err != nil || m.Epoch != 3 || m.Pending != nil || len(m.Draining) != 0 {
		t.Fatalf("BumpEpoch resuming a pending bump = %+v, %v; want epoch 3 in force", m, err)
	}
	if ea, eb := epochOn(t, cliA, prefix), epochOn(t, cliB, prefix); ea != 3 || eb != 3 {
		t.Fatalf("cluster epochs: a %d, b %d; want 3 on both", ea, eb)
	}
}

// After the home cluster is restored from before the last change, the
// stored map is older than the clusters: neither a bump nor a resharding
// may build on it.
func TestChangeRefusedWhileMapIsBehindClusters(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	a, b := etcdtest.Start(t), etcdtest.Start(t)
	ca, cb := member("a", a), member("b", b)
	cliA, cliB := a.Client(), b.Client()
	const prefix = "/behind"
	store := NewStore(cliA, prefix)
	before := storeAt(t, store, prefix, 2, ca, cliA)
	if err := BumpEpoch(ctx, cliA, prefix, 2, 3); err != nil { // the change the restore lost
		t.Fatal(err)
	}
	rs := &Resharder{Store: store, Prefix: prefix}
	if _, err := rs.BumpEpoch(ctx); !errors.Is(err, ErrEpochConflict) || !strings.Contains(err.Error(), `cluster "a" is at epoch 3, past the stored map's epoch 2`) {
		t.Errorf("BumpEpoch with the map behind cluster a = %v; want ErrEpochConflict naming both epochs", err)
	}
	if _, err := rs.Apply(ctx, []Cluster{ca, cb}); !errors.Is(err, ErrEpochConflict) {
		t.Errorf("Apply with the map behind cluster a = %v; want ErrEpochConflict", err)
	}
	if got, err := store.Load(ctx); err != nil || !reflect.DeepEqual(got, before) {
		t.Errorf("stored map after the refusals = %+v, %v; want it untouched: %+v", got, err, before)
	}
	if e := epochOn(t, cliB, prefix); e != MinEpoch {
		t.Errorf("cluster b at epoch %d after the refusals; want %d, untouched", e, MinEpoch)
	}
}

// restorable is an etcd member whose data directory can be saved while it
// is stopped and put back later: a restore from a backup, revisions and
// meta/epoch included.
type restorable struct {
	t   *testing.T
	cfg embedetcd.Config
	srv *embedetcd.Server
}

func startRestorable(t *testing.T) *restorable {
	t.Helper()
	client, err := embedetcd.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := embedetcd.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := &restorable{t: t, cfg: embedetcd.Config{Name: "r", Dir: t.TempDir(), ClientAddr: client, PeerAddr: peer, UnsafeNoFsync: true}}
	m.start()
	t.Cleanup(m.stop)
	return m
}

func (m *restorable) start() {
	m.t.Helper()
	srv, err := embedetcd.Start(m.cfg)
	if err != nil {
		m.t.Fatal(err)
	}
	m.srv = srv
}

func (m *restorable) stop() {
	if m.srv != nil {
		m.srv.Close()
		m.srv = nil
	}
}

func (m *restorable) dataDir() string { return filepath.Join(m.cfg.Dir, m.cfg.Name+".etcd") }

// backup copies the data directory while the member is stopped.
func (m *restorable) backup() string {
	m.t.Helper()
	m.stop()
	dst := filepath.Join(m.t.TempDir(), "backup")
	if err := os.CopyFS(dst, os.DirFS(m.dataDir())); err != nil {
		m.t.Fatal(err)
	}
	m.start()
	return dst
}

// restore replaces the data with backup and starts the member again on the
// same addresses.
func (m *restorable) restore(backup string) {
	m.t.Helper()
	m.stop()
	if err := os.RemoveAll(m.dataDir()); err != nil {
		m.t.Fatal(err)
	}
	if err := os.CopyFS(m.dataDir(), os.DirFS(backup)); err != nil {
		m.t.Fatal(err)
	}
	if err := os.Chmod(m.dataDir(), 0o700); err != nil {
		m.t.Fatal(err)
	}
	m.start()
}

// TestBumpEpochAfterRestore restores a cluster from a backup taken before
// some grants: its revisions go back, and so, within the epoch, do its
// tokens. The bump puts every later grant above everything issued before.
func TestBumpEpochAfterRestore(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	home := etcdtest.Start(t)
	b := startRestorable(t)
	cliHome := home.Client()
	ca := member("a", home)
	cb := Cluster{Name: "b", Endpoints: []string{b.srv.Endpoint()}}
	const prefix = "/restore"
	saved := b.backup()

	r := newTestRouter(t, cliHome, Map{Epoch: MinEpoch, Clusters: []Cluster{ca, cb}}, prefix)
	g := &grants{t: t, r: r}
	name := nameOn(t, []string{"a", "b"}, "b")
	issued := map[int64]bool{}
	var highest int64
	for range 5 {
		tok := g.take(name).Token()
		issued[tok], highest = true, max(highest, tok)
	}

	b.restore(saved)
	// The premise: served under the old epoch, the restored cluster hands
	// out a token that is not above those already issued. (Bumping first
	// is the procedure; this grant shows what it prevents.)
	if tok := g.take(name).Token(); tok > highest {
		t.Fatalf("restored cluster granted token %d, above %d: revisions did not go back, the test proves nothing", tok, highest)
	} else if issued[tok] {
		t.Logf("restored cluster reissued token %d, which an earlier grant already had", tok)
	}

	rs := &Resharder{Store: NewStore(cliHome, prefix), Prefix: prefix}
	if _, err := rs.BumpEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	gr := g.take(name)
	if gr.Epoch != 2 || gr.Token() <= highest {
		t.Fatalf("grant after the bump: token %d (epoch %d); want epoch 2 and above %d, every token issued before", gr.Token(), gr.Epoch, highest)
	}
}
