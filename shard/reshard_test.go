package shard

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

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
	rs := &Resharder{Store: store, Prefix: prefix}

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
	if MaxEpoch != queue.MaxEpoch {
		t.Errorf("MaxEpoch = %d; want queue.MaxEpoch %d", MaxEpoch, queue.MaxEpoch)
	}
}
