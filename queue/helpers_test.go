package queue

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/etcdtest"
)

func newFakeClock() *clock.Fake { return clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

func etcdtestCompact(cli *clientv3.Client) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return etcdtest.Compact(ctx, cli)
}
