package shard

import (
	"context"
	"fmt"
	"slices"
)

// BumpEpoch moves the map from epoch e to e+1 without moving any name: the
// same clusters, through steps 1 to 3 of the resharding protocol, with
// nothing to drain. It returns the map now in force.
//
// It is for restores. A cluster restored from an older snapshot hands out
// revisions it had already handed out, so within epoch e a new grant could
// get a token (e<<48 | revision) lower than one a resource already
// accepted, and be refused, or equal to another grant's token, and be
// accepted beside it. After the bump every waiter enqueues under e+1, so
// its token exceeds every token of epoch e on every cluster, whatever the
// revisions.
//
// The order of the steps is what makes "after the bump" hold on every
// cluster at once:
//
//  1. the map is announced with e+1 pending first, so that a gateway whose
//     enqueue a bumped cluster refuses finds a newer map coming and waits
//     for it instead of failing, and so that an interrupted bump can be
//     resumed (BumpEpoch finishes a pending bump);
//  2. every cluster's meta/epoch goes to e+1 before any gateway routes by
//     e+1. An enqueue compares meta/epoch inside its own txn, so on each
//     cluster every waiter of epoch e is created before that cluster's bump
//     and none after it;
//  3. e+1 is activated only once all clusters obey it. So when BumpEpoch
//     returns, no cluster accepts an enqueue under e, whatever map a slow
//     gateway still routes by. Activating earlier would let a cluster not
//     yet bumped — the restored one, say — go on taking epoch-e waiters,
//     with reused revisions, from gateways that have not seen the new map,
//     after the operator was told the bump is done.
//
// A waiter enqueued before the bump keeps epoch e in its token even if it
// is granted after the bump: bump a restored cluster before gateways
// enqueue on it again (docs/operations.md, "Backup and restore").
//
// BumpEpoch refuses, writing nothing, while a change drains (run Sweep),
// while a change to other clusters is pending (finish it: it moves the
// epoch too), while a cluster is already past the stored map (the home
// cluster restored from before the last change), and when e+1 would pass
// EpochLimit.
func (rs *Resharder) BumpEpoch(ctx context.Context) (Map, error) {
	snap, err := rs.Store.Load(ctx)
	if err != nil {
		return Map{}, err
	}
	cur := snap.Map
	if p := cur.Pending; p != nil && !slices.Equal(sortedNames(p.Clusters), sortedNames(cur.Clusters)) {
		return cur, fmt.Errorf("shard: epoch %d has a pending change to clusters %q; finish it with the same add or remove (it moves to epoch %d too) instead of a bump",
			cur.Epoch, p.ClusterNames(), p.Epoch)
	}
	return rs.advance(ctx, snap, cur.Clusters)
}
