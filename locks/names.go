package locks

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// Names lists the lock names that hold keys in a cluster, by the lock
// engine's key layout: set it as shard.Resharder.Names so the sweep can
// tell when a draining cluster holds no name that moved away.
type Names struct{}

var _ shard.NameLister = Names{}

// ListNames lists the names with a holder or waiter key in any key space
// of the cluster at prefix: the unnamed tenant's and every tenant's
// (TenantPrefix). Each key is parsed from the cluster's root down
// (engineOf, then queue.SplitWaiterKey), so no other record of a space — a
// session's, a holds or delay record, an audit entry — passes for a
// waiter's, whatever a tenant is called.
func (Names) ListNames(ctx context.Context, cli *clientv3.Client, prefix string) ([]string, error) {
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("locks: list names: %w", err)
	}
	var out []string
	seen := map[string]bool{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		e, ok := engineOf(prefix, k)
		if !ok {
			continue
		}
		if name, _, ok := queue.SplitWaiterKey(e, k); ok && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out, nil
}
