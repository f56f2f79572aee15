package locks

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// Names lists the lock names that hold keys in a cluster, by the lock
// engine's key layout: set it as shard.Resharder.Names so the sweep can
// tell when a draining cluster holds no name that moved away.
type Names struct{}

var _ shard.NameLister = Names{}

// ListNames lists the names with a holder or waiter key under prefix.
func (Names) ListNames(ctx context.Context, cli *clientv3.Client, prefix string) ([]string, error) {
	return queue.ListNames(ctx, cli, prefix)
}
