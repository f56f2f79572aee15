package fencetest_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/fence"
	"github.com/leasegate/leasegate/fence/storetest"
	"github.com/leasegate/leasegate/internal/etcdtest"
)

// newEtcdGuard starts an embedded etcd member for the test and returns a
// guard on it and a client of it.
func newEtcdGuard(t *testing.T) (*fence.EtcdGuard, *clientv3.Client) {
	t.Helper()
	cli := etcdtest.Start(t).Client()
	return fence.NewEtcdGuard(cli, "/test/"+t.Name()), cli
}

func TestEtcdSemantics(t *testing.T) {
	g, _ := newEtcdGuard(t)
	storetest.Semantics(t, g)
}

// TestEtcdPutDance plays the fencing dance (see fence.Orders) against a
// real etcd: the data key changes only with the token, in the same
// transaction.
func TestEtcdPutDance(t *testing.T) {
	ctx := testCtx(t)
	g, cli := newEtcdGuard(t)
	res, data := "order:42", "/orders/42"
	get := func() string {
		resp, err := cli.Get(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	if err := g.Put(ctx, res, 10, data, "A: processing"); err != nil {
		t.Fatalf("Put with first token 10 = %v; want nil", err)
	}
	if err := g.Put(ctx, res, 11, data, "B: shipped"); err != nil {
		t.Fatalf("Put with newer token 11 = %v; want nil", err)
	}
	err := g.Put(ctx, res, 10, data, "A: cancelled")
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStaleToken) || se.Token != 10 || se.Highest != 11 {
		t.Fatalf("Put with stale token 10 = %v; want a stale token error 10 < 11", err)
	}
	if want := `fence: stale token 10 for "order:42": highest accepted is 11`; err.Error() != want {
		t.Errorf("error %q; want %q", err, want)
	}
	if v := get(); v != "B: shipped" {
		t.Fatalf("data after refused write = %q; want %q", v, "B: shipped")
	}
	if err := g.Put(ctx, res, 11, data, "B: delivered"); err != nil {
		t.Fatalf("Put with equal token 11 = %v; want nil", err)
	}
	if v := get(); v != "B: delivered" {
		t.Fatalf("data after equal-token write = %q; want %q", v, "B: delivered")
	}
	resp, err := cli.Get(ctx, g.TokenKey(res))
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "00000000000000000011" {
		t.Fatalf("token key holds %v, %v; want 00000000000000000011", resp, err)
	}
	// Numeric, not lexicographic, order of unpadded numbers: 9 < 10.
	if err := g.Accept(ctx, "pad", 9); err != nil {
		t.Fatal(err)
	}
	if err := g.Accept(ctx, "pad", 10); err != nil {
		t.Errorf("Accept(pad, 10) after 9 = %v; want nil", err)
	}
	// A transaction etcd rejects applies nothing, token included.
	if err := g.Write(ctx, res, 12, clientv3.OpPut(g.TokenKey(res), "x")); err == nil || errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("Write with an op on the token key = %v; want etcd's error", err)
	}
	if h, _, _ := g.Highest(ctx, res); h != 11 {
		t.Errorf("Highest after rejected transaction = %d; want 11", h)
	}
}

// etcdRaceStore fences a data key and an accept log with g: every accepted
// write puts a fresh log key in the same transaction, and etcd's revisions
// order the log.
func etcdRaceStore(g *fence.EtcdGuard, cli *clientv3.Client) storetest.RaceStore {
	var seq atomic.Int64
	logPrefix := func(res string) string { return "/race/log/" + res + "/" }
	dataKey := func(res string) string { return "/race/data/" + res }
	return storetest.RaceStore{
		Write: func(ctx context.Context, res string, tok int64) error {
			val := strconv.FormatInt(tok, 10)
			return g.Write(ctx, res, tok,
				clientv3.OpPut(logPrefix(res)+strconv.FormatInt(seq.Add(1), 10), val),
				clientv3.OpPut(dataKey(res), val))
		},
		Accepted: func(ctx context.Context, res string) ([]int64, error) {
			resp, err := cli.Get(ctx, logPrefix(res), clientv3.WithPrefix())
			if err != nil {
				return nil, err
			}
			kvs := slices.Clone(resp.Kvs)
			slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.ModRevision, b.ModRevision) })
			log := make([]int64, len(kvs))
			for i, kv := range kvs {
				if log[i], err = strconv.ParseInt(string(kv.Value), 10, 64); err != nil {
					return nil, err
				}
			}
			return log, nil
		},
		Data: func(ctx context.Context, res string) (int64, bool, error) {
			resp, err := cli.Get(ctx, dataKey(res))
			if err != nil || len(resp.Kvs) == 0 {
				return 0, false, err
			}
			tok, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
			return tok, err == nil, err
		},
	}
}

func TestEtcdRace(t *testing.T) {
	g, cli := newEtcdGuard(t)
	storetest.Race(t, etcdRaceStore(g, cli), "etcd", storetest.RaceSizes{Writers: 4, Rounds: 500, PerWriter: 500})
}

// TestEtcdMiddleware runs the HTTP middleware over the etcd guard: any Store
// works behind it.
func TestEtcdMiddleware(t *testing.T) {
	g, _ := newEtcdGuard(t)
	srv := storetest.NewServer(t, g)
	for i, st := range []struct {
		token int64
		code  int
	}{{10, 200}, {11, 200}, {10, 409}, {11, 200}} {
		if code, _ := srv.Do(t, "order:42", fmt.Sprint(st.token)); code != st.code {
			t.Errorf("request %d with token %d: status %d; want %d", i, st.token, code, st.code)
		}
	}
}
