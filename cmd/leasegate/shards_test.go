package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

func runRoot(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func TestShardsShowAddRemove(t *testing.T) {
	t.Parallel()
	a, b := etcdtest.Start(t), etcdtest.Start(t)
	home := "a=" + a.Endpoint()
	// A first map, as a gateway stores it on its first start.
	store := shard.NewStore(a.Client(), "/lg")
	if _, err := store.CompareAndSwap(context.Background(), shard.Snapshot{}, shard.Map{
		Epoch: 1, Clusters: []shard.Cluster{{Name: "a", Endpoints: []string{a.Endpoint()}}},
	}); err != nil {
		t.Fatal(err)
	}
	out, _, err := runRoot(t, "shards", "show", "--etcd", home, "--prefix", "/lg")
	if err != nil || !strings.HasPrefix(strings.Join(strings.Fields(out), " "), "epoch 1 cluster a http://") {
		t.Fatalf("shards show = %q, %v", out, err)
	}
	out, progress, err := runRoot(t, "shards", "add", "b="+b.Endpoint(), "--etcd", home, "--prefix", "/lg", "-o", "json")
	if err != nil {
		t.Fatalf("shards add: %v\n%s", err, progress)
	}
	var m shard.Map
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("shards add -o json printed %q: %v", out, err)
	}
	if m.Epoch != 2 || len(m.Clusters) != 2 || len(m.Draining) != 0 || len(m.Previous) != 0 {
		t.Fatalf("map after add = %+v; want epoch 2, clusters a and b, nothing draining", m)
	}
	for _, c := range []*etcdtest.Cluster{a, b} {
		if e, err := shard.ReadEpoch(context.Background(), c.Client(), "/lg"); err != nil || e != 2 {
			t.Fatalf("cluster epoch = %d, %v; want 2 on every cluster", e, err)
		}
	}
	out, _, err = runRoot(t, "shards", "remove", "a", "--etcd", home, "--prefix", "/lg", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.Epoch != 3 || len(m.Clusters) != 1 || m.Clusters[0].Name != "b" {
		t.Fatalf("map after remove = %+v, %v; want epoch 3 with only b", m, err)
	}
}

func TestShardsBadInput(t *testing.T) {
	t.Parallel()
	a := etcdtest.Start(t)
	for _, args := range [][]string{
		{"shards", "show"},
		{"shards", "show", "--etcd", "a=" + a.Endpoint(), "-o", "yaml"},
		{"shards", "add", "no-endpoints", "--etcd", "a=" + a.Endpoint()},
	} {
		_, _, err := runRoot(t, args...)
		var ue usageError
		if err == nil || !errors.As(err, &ue) {
			t.Errorf("%v = %v; want a usage error", args, err)
		}
	}
}

// startGateway runs a gateway in-process over clusters (the first is home)
// and returns a client of it.
func startGateway(t *testing.T, prefix string, noMapWatch bool, clusters ...server.Cluster) *client.Client {
	t.Helper()
	g := gwtest.Start(t, nil, gwtest.Prefix(prefix), gwtest.Clusters(clusters...),
		gwtest.Configure(func(c *server.Config) { c.Fleet.Watch = !noMapWatch }))
	return g.SDK(t)
}

// grant takes name through c, releases it and returns its token.
func grant(t *testing.T, c *client.Client, name string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.TryAcquire(ctx, name, client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire(%q) = %v", name, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return l.Token()
}

// TestShardsBumpEpoch runs `leasegate shards bump-epoch` under two running
// gateways, one following the map and one that reloads it only when a
// cluster refuses its epoch: both grant under the new epoch at once, above
// every token issued before.
func TestShardsBumpEpoch(t *testing.T) {
	t.Parallel()
	a, b := etcdtest.Start(t), etcdtest.Start(t)
	const prefix = "/lg-bump"
	clusters := []server.Cluster{{Name: "a", Endpoints: []string{a.Endpoint()}}, {Name: "b", Endpoints: []string{b.Endpoint()}}}
	following := startGateway(t, prefix, false, clusters...)
	stale := startGateway(t, prefix, true, clusters...)
	names := []string{"order:1", "order:2", "order:3", "order:4"}
	var highest int64
	for i, n := range names {
		for _, c := range []*client.Client{following, stale} {
			tok := grant(t, c, n)
			if e, _, _ := queue.SplitToken(tok); e != 1 {
				t.Fatalf("token %d of grant %d before the bump carries epoch %d; want 1", tok, i, e)
			}
			highest = max(highest, tok)
		}
	}

	out, progress, err := runRoot(t, "shards", "bump-epoch", "--etcd", "a="+a.Endpoint(), "--prefix", prefix, "-o", "json")
	if err != nil {
		t.Fatalf("shards bump-epoch: %v\n%s", err, progress)
	}
	var m shard.Map
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("shards bump-epoch -o json printed %q: %v", out, err)
	}
	if m.Epoch != 2 || len(m.Clusters) != 2 || m.Pending != nil || len(m.Previous) != 0 || len(m.Draining) != 0 {
		t.Fatalf("map after bump-epoch = %+v; want epoch 2 over a and b, nothing pending or draining", m)
	}
	for _, c := range []*etcdtest.Cluster{a, b} {
		if e, err := shard.ReadEpoch(context.Background(), c.Client(), prefix); err != nil || e != 2 {
			t.Fatalf("cluster epoch = %d, %v; want 2 on every cluster", e, err)
		}
	}
	for _, n := range names {
		for gw, c := range map[string]*client.Client{"following": following, "stale": stale} {
			tok := grant(t, c, n)
			if e, _, _ := queue.SplitToken(tok); e != 2 || tok <= highest {
				t.Errorf("%s gateway, %q after the bump: token %d (epoch %d); want epoch 2 and above %d, the highest before", gw, n, tok, e, highest)
			}
		}
	}
}

func TestShardsEpochLimit(t *testing.T) {
	t.Parallel()
	a, b := etcdtest.Start(t), etcdtest.Start(t)
	const prefix = "/lg-limit"
	home := "a=" + a.Endpoint()
	ctx := context.Background()
	// A deployment 30 changes old: map and cluster at epoch 31.
	if err := shard.BumpEpoch(ctx, a.Client(), prefix, shard.MinEpoch, shard.MaxJSONSafeEpoch); err != nil {
		t.Fatal(err)
	}
	if _, err := shard.NewStore(a.Client(), prefix).CompareAndSwap(ctx, shard.Snapshot{}, shard.Map{
		Epoch: shard.MaxJSONSafeEpoch, Clusters: []shard.Cluster{{Name: "a", Endpoints: []string{a.Endpoint()}}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"shards", "add", "b=" + b.Endpoint(), "--etcd", home, "--prefix", prefix},
		{"shards", "bump-epoch", "--etcd", home, "--prefix", prefix},
	} {
		_, _, err := runRoot(t, args...)
		var ue usageError
		if !errors.Is(err, shard.ErrEpochLimit) || errors.As(err, &ue) || !strings.Contains(err.Error(), "epoch 32 is refused") || !strings.Contains(err.Error(), "--max-epoch") {
			t.Errorf("%v at epoch 31 = %v; want a refusal (not a usage error) of epoch 32 that names --max-epoch", args[:2], err)
		}
	}
	for _, v := range []string{"0", fmt.Sprint(shard.MaxEpoch + 1), "-1", "x"} {
		_, _, err := runRoot(t, "shards", "add", "b="+b.Endpoint(), "--max-epoch", v, "--etcd", home, "--prefix", prefix)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("add --max-epoch %s = %v; want a usage error", v, err)
		}
	}
	if e, err := shard.ReadEpoch(ctx, a.Client(), prefix); err != nil || e != shard.MaxJSONSafeEpoch {
		t.Fatalf("cluster epoch after the refusals = %d, %v; want 31, untouched", e, err)
	}
	out, _, err := runRoot(t, "shards", "add", "b="+b.Endpoint(), "--max-epoch", "32", "--etcd", home, "--prefix", prefix, "-o", "json")
	var m shard.Map
	if err != nil || json.Unmarshal([]byte(out), &m) != nil || m.Epoch != 32 {
		t.Fatalf("add --max-epoch 32 = %q, %v; want the map at epoch 32", out, err)
	}
}
