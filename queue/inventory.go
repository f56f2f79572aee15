package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Occupied reports whether any waiter or holder key exists for name.
func (e *Engine) Occupied(ctx context.Context, name string) (bool, error) {
	resp, err := e.cli.Get(ctx, e.keys.namePrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("queue: count keys: %w", err)
	}
	return resp.Count > 0, nil
}

// PendingDelay reports until when a lock-delay or loss wait of a holder of
// name on this cluster withholds the name, stamping the ones nobody has
// stamped yet (their first sighting); zero when none is pending. A name
// that moved to another cluster is withheld there as long as here.
func (e *Engine) PendingDelay(ctx context.Context, name string) (time.Time, error) {
	return e.awaitLockDelays(ctx, name, false)
}

// Drained reports whether name has no key and no lock-delay record on
// this cluster, read in one revision; it writes nothing. It is what
// WaitEmpty waits for (WaitEmpty clears the records whose delays have
// passed), so where no new keys can appear — a cluster draining a name
// that moved away — a name not drained has let no waiter elsewhere past
// it, and a drained one stays drained.
func (e *Engine) Drained(ctx context.Context, name string) (bool, error) {
	resp, err := e.cli.Txn(ctx).Then(
		clientv3.OpGet(e.keys.namePrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(e.keys.delayPrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return false, fmt.Errorf("queue: count keys: %w", err)
	}
	return resp.Responses[0].GetResponseRange().Count == 0 && resp.Responses[1].GetResponseRange().Count == 0, nil
}

// WaitEmpty blocks until no key exists for name on this cluster and no
// lock-delay or loss wait of its holders is pending, or ctx ends. It
// watches the name's keys from the revision it read; compaction or a
// failed watch lead to a re-read, never to a hang. It is only meaningful
// where no new keys can appear (a cluster draining a name that moved away).
// onCount, when set, receives the number of keys left whenever it changes.
func (e *Engine) WaitEmpty(ctx context.Context, name string, onCount func(int64)) error {
	last := int64(-1)
	prefix := e.keys.namePrefix(name)
	b := newBackoff(e.cfg.Clock)
	for {
		resp, err := e.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 0 {
			if _, err = e.awaitLockDelays(ctx, name, true); err == nil || ctx.Err() != nil {
				return err
			}
		}
		if err != nil {
			if werr := b.wait(ctx); werr != nil {
				return werr
			}
			continue
		}
		if onCount != nil && resp.Count != last {
			last = resp.Count
			onCount(resp.Count)
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := e.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-ctx.Done():
		case wr := <-wch:
			if err := wr.Err(); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
				_ = b.wait(ctx)
			}
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// CountAllLocks counts every waiter and holder key of the engine's
// Config.Prefix and of the spaces it served lately (Space): every space
// of the cluster this engine knows of. It does not count as a use of a
// space.
func (e *Engine) CountAllLocks(ctx context.Context) (int64, error) {
	spaces := e.servedSpaces()
	const chunk = 100 // below etcd's default limit of operations per transaction
	var total int64
	for i := 0; i < len(spaces); i += chunk {
		part := spaces[i:min(i+chunk, len(spaces))]
		ops := make([]clientv3.Op, len(part))
		for j, p := range part {
			ops[j] = clientv3.OpGet(LocksPrefix(p), clientv3.WithPrefix(), clientv3.WithCountOnly())
		}
		resp, err := e.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return 0, fmt.Errorf("queue: count keys: %w", err)
		}
		for _, r := range resp.Responses {
			total += r.GetResponseRange().Count
		}
	}
	return total, nil
}

// CountKeys counts every waiter, holder and session record of this
// engine's space: everything a caller can make it store.
func (e *Engine) CountKeys(ctx context.Context) (int64, error) {
	resp, err := e.cli.Txn(ctx).Then(
		clientv3.OpGet(e.keys.locks(), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(e.keys.sessions(), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("queue: count keys: %w", err)
	}
	return resp.Responses[0].GetResponseRange().Count + resp.Responses[1].GetResponseRange().Count, nil
}

// ListNames lists every name (an engine name: ElectionName of an
// election's) with a key in the engine at prefix.
func ListNames(ctx context.Context, cli *clientv3.Client, prefix string) ([]string, error) {
	resp, err := cli.Get(ctx, LocksPrefix(prefix), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("queue: list names: %w", err)
	}
	var out []string
	seen := map[string]bool{}
	for _, kv := range resp.Kvs {
		if name, _, ok := SplitWaiterKey(prefix, string(kv.Key)); ok && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out, nil
}
