package shard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/etcdtest"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEpochFormat(t *testing.T) {
	tests := []struct {
		epoch uint16
		want  string
	}{{1, "00001"}, {2, "00002"}, {31, "00031"}, {MaxEpoch, "32767"}}
	for _, tt := range tests {
		if got := FormatEpoch(tt.epoch); got != tt.want {
			t.Errorf("FormatEpoch(%d) = %q; want %q", tt.epoch, got, tt.want)
		}
		if got, err := ParseEpoch([]byte(tt.want)); got != tt.epoch || err != nil {
			t.Errorf("ParseEpoch(%q) = %d, %v; want %d", tt.want, got, err, tt.epoch)
		}
	}
	for _, bad := range []string{"", "1", "00000", "32768", "99999", "+0001", "0001x", "000001"} {
		if got, err := ParseEpoch([]byte(bad)); !errors.Is(err, ErrInvalidEpoch) || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseEpoch(%q) = %d, %v; want ErrInvalidEpoch naming the value", bad, got, err)
		}
	}
	// Fixed width keeps byte order equal to numeric order.
	if !(FormatEpoch(9) < FormatEpoch(10) && FormatEpoch(999) < FormatEpoch(1000)) {
		t.Error("FormatEpoch does not sort numerically")
	}
	if got := EpochKey(""); got != "/leasegate/meta/epoch" {
		t.Errorf("EpochKey(\"\") = %q; want /leasegate/meta/epoch", got)
	}
	if got := EpochKey("/x/"); got != "/x/meta/epoch" {
		t.Errorf("EpochKey(/x/) = %q; want /x/meta/epoch", got)
	}
}

// guarded runs a txn guarded by EpochCompare(prefix, epoch), as an enqueue
// would, and reports whether the guard held.
func guarded(t *testing.T, cli *clientv3.Client, prefix string, epoch uint16) bool {
	t.Helper()
	resp, err := cli.Txn(testCtx(t)).If(EpochCompare(prefix, epoch)).Then(clientv3.OpPut(prefix+"/probe", "x")).Commit()
	if err != nil {
		t.Fatalf("txn guarded by epoch %d: %v", epoch, err)
	}
	return resp.Succeeded
}

func TestEpochFence(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Start(t).Client()
	ctx := testCtx(t)
	const prefix = "/lg"

	// A fresh cluster is at epoch 1 with no key written.
	if e, err := ReadEpoch(ctx, cli, prefix); e != 1 || err != nil {
		t.Fatalf("ReadEpoch(fresh) = %d, %v; want 1", e, err)
	}
	if !guarded(t, cli, prefix, 1) || guarded(t, cli, prefix, 2) {
		t.Fatal("fresh cluster: want the epoch 1 guard to hold and the epoch 2 guard to fail")
	}

	if err := BumpEpoch(ctx, cli, prefix, 1, 2); err != nil {
		t.Fatalf("BumpEpoch(1→2) = %v", err)
	}
	resp, _ := cli.Get(ctx, EpochKey(prefix))
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "00002" {
		t.Fatalf("stored epoch = %v; want 00002", resp.Kvs)
	}
	if e, err := ReadEpoch(ctx, cli, prefix); e != 2 || err != nil {
		t.Fatalf("ReadEpoch = %d, %v; want 2", e, err)
	}
	if guarded(t, cli, prefix, 1) || !guarded(t, cli, prefix, 2) || guarded(t, cli, prefix, 3) {
		t.Fatal("epoch 2: want only the epoch 2 guard to hold")
	}

	// A retried bump is idempotent; a stale or backward one is refused.
	if err := BumpEpoch(ctx, cli, prefix, 1, 2); err != nil {
		t.Errorf("BumpEpoch(1→2) retried = %v; want nil", err)
	}
	if err := BumpEpoch(ctx, cli, prefix, 1, 3); !errors.Is(err, ErrEpochConflict) || !strings.Contains(err.Error(), "found epoch 2") {
		t.Errorf("BumpEpoch(1→3) at epoch 2 = %v; want ErrEpochConflict naming epoch 2", err)
	}
	if err := BumpEpoch(ctx, cli, prefix, 2, 2); !errors.Is(err, ErrInvalidEpoch) {
		t.Errorf("BumpEpoch(2→2) = %v; want ErrInvalidEpoch", err)
	}
	if err := BumpEpoch(ctx, cli, prefix, 3, 1); !errors.Is(err, ErrInvalidEpoch) {
		t.Errorf("BumpEpoch(3→1) = %v; want ErrInvalidEpoch", err)
	}
	if err := BumpEpoch(ctx, cli, prefix, 2, MaxEpoch+1); !errors.Is(err, ErrInvalidEpoch) {
		t.Errorf("BumpEpoch(2→%d) = %v; want ErrInvalidEpoch", MaxEpoch+1, err)
	}
	if err := BumpEpoch(ctx, cli, prefix, 2, MaxEpoch); err != nil {
		t.Errorf("BumpEpoch(2→%d) = %v", MaxEpoch, err)
	}
	if !guarded(t, cli, prefix, MaxEpoch) || guarded(t, cli, prefix, 0) || guarded(t, cli, prefix, MaxEpoch+1) {
		t.Error("want only the MaxEpoch guard to hold; out-of-range guards never hold")
	}

	// Prefixes are independent, and garbage is reported, not guessed at.
	if e, err := ReadEpoch(ctx, cli, "/other"); e != 1 || err != nil {
		t.Errorf("ReadEpoch(/other) = %d, %v; want 1", e, err)
	}
	for _, v := range []string{"7", "00001"} {
		cli.Put(ctx, EpochKey("/bad"), v)
		if _, err := ReadEpoch(ctx, cli, "/bad"); !errors.Is(err, ErrInvalidEpoch) || !strings.Contains(err.Error(), `"`+v+`"`) {
			t.Errorf("ReadEpoch(/bad holding %q) = %v; want ErrInvalidEpoch naming the value", v, err)
		}
	}
}

// Concurrent coordinators racing the same bump: exactly one txn writes.
func TestBumpEpochRace(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t)
	ctx := testCtx(t)
	errs := make(chan error, 8)
	for range 8 {
		cli := c.Client()
		go func() { errs <- BumpEpoch(ctx, cli, "", 1, 2) }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("BumpEpoch(1→2) = %v; want nil (done or already done)", err)
		}
	}
	resp, err := c.Client().Get(ctx, EpochKey(""))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Version != 1 {
		t.Fatalf("epoch key after racing bumps = %v, %v; want written exactly once", resp, err)
	}
}
