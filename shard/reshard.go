package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
)

// NameLister lists the lock names that hold keys in one cluster under a
// key prefix. Step 4 of a change needs it to see whether a draining
// cluster still holds names that moved away; shard does not know how lock
// keys are laid out, so whoever owns the lock engines provides it
// (locks.Names).
type NameLister interface {
	// ListNames lists the names with at least one key on cli under prefix.
	ListNames(ctx context.Context, cli *clientv3.Client, prefix string) ([]string, error)
}

// Resharder changes the shard map without ever granting a name twice.
//
// The order of the steps is what makes it safe. For a change from epoch e
// to e+1:
//
//  1. write map e with Pending = map e+1: gateways learn it, but still
//     route by e;
//  2. bump <prefix>/meta/epoch to e+1 on every cluster of both maps. From
//     then on a cluster refuses every enqueue routed by e, so the keys of a
//     name that moves from A to B can only disappear from A; a gateway whose
//     enqueue is refused reloads the map and waits for step 3;
//  3. write map e+1 with the old clusters as Previous and Draining: a
//     waiter for a moved name enqueues on B and is granted only once it is
//     first on B and A holds none of the name's keys. Holders and waiters
//     already on A finish there (renew and release do not compare epochs);
//  4. Sweep: once a draining cluster holds no key of a name that moved
//     away from it, drop it from Draining; when none is left, drop Previous.
//
// Tokens from B carry epoch e+1 in their top bits, so they exceed every
// token A ever issued for the name.
//
// Every change spends one epoch, and no change passes EpochLimit.
type Resharder struct {
	// Store holds the map in the home cluster.
	Store *Store
	// Prefix is the etcd key prefix. Default DefaultPrefix.
	Prefix string
	// EpochLimit is the highest epoch a change may move the map to; a change
	// past it is refused with ErrEpochLimit before anything is written. Zero
	// means MaxJSONSafeEpoch, so that tokens stay below 2^53 and exact for
	// clients that read them as JSON numbers (JavaScript, k6, the REST API's
	// fencingToken read as a number). Raise it, up to MaxEpoch, only once
	// every such client reads tokens as strings or 64-bit integers.
	EpochLimit uint16
	// Dial connects to a cluster. Default DialCluster.
	Dial func(name string, endpoints []string) (*clientv3.Client, error)
	// Endpoints override the map's endpoints by cluster name.
	Endpoints map[string][]string
	// Names lists the lock names on a draining cluster; Sweep needs it and
	// fails without it (Apply and BumpEpoch do not).
	Names NameLister
	// Progress, when set, receives one line per step.
	Progress func(format string, args ...any)
}

func (rs *Resharder) say(format string, args ...any) {
	if rs.Progress != nil {
		rs.Progress(format, args...)
	}
}

func (rs *Resharder) prefix() string { return normPrefix(rs.Prefix) }

func (rs *Resharder) dial(c Cluster) (*clientv3.Client, error) {
	dial := rs.Dial
	if dial == nil {
		dial = DialCluster
	}
	eps := c.Endpoints
	if o, ok := rs.Endpoints[c.Name]; ok {
		eps = o
	}
	return dial(c.Name, eps)
}

// Apply runs steps 1 to 3, moving the map to clusters. It resumes a change
// left half done (a pending map for the same clusters). It returns the map
// now in force, which may still list draining clusters: run Sweep. It
// refuses, writing nothing, while a change drains, while a change to other
// clusters is pending, while a cluster is already past the stored map, and
// when the new epoch would pass EpochLimit.
func (rs *Resharder) Apply(ctx context.Context, clusters []Cluster) (Map, error) {
	snap, err := rs.Store.Load(ctx)
	if err != nil {
		return Map{}, err
	}
	cur := snap.Map
	if cur.Pending != nil && !slices.Equal(sortedNames(cur.Pending.Clusters), sortedNames(clusters)) {
		return cur, fmt.Errorf("shard: epoch %d already has a different pending map %q", cur.Epoch, cur.Pending.ClusterNames())
	}
	return rs.advance(ctx, snap, clusters)
}

// advance runs steps 1 to 3 from the stored map snap to clusters at the
// next epoch, resuming snap's pending map if it has one (the caller checked
// that it is for the same clusters).
func (rs *Resharder) advance(ctx context.Context, snap Snapshot, clusters []Cluster) (Map, error) {
	cur := snap.Map
	if len(cur.Draining) > 0 {
		return cur, fmt.Errorf("shard: epoch %d is still draining %q; run the sweep first", cur.Epoch, cur.Draining)
	}
	next := Map{Epoch: cur.Epoch + 1, Clusters: clusters}
	if err := rs.allow(cur, next.Epoch); err != nil {
		return cur, err
	}
	if err := next.Validate(); err != nil {
		return cur, err
	}
	var involved []Cluster
	seen := map[string]bool{}
	for _, c := range append(append([]Cluster(nil), cur.Clusters...), clusters...) {
		if !seen[c.Name] {
			seen[c.Name] = true
			involved = append(involved, c)
		}
	}
	var err error
	if cur.Pending == nil {
		if err := rs.checkMapCurrent(ctx, cur, involved); err != nil {
			return cur, err
		}
		announced := cur
		announced.Pending = &next
		if snap, err = rs.Store.CompareAndSwap(ctx, snap, announced); err != nil {
			return cur, err
		}
		rs.say("epoch %d announced as pending (clusters %q)", next.Epoch, next.ClusterNames())
	}
	for _, c := range involved {
		if err := rs.bumpCluster(ctx, c, next.Epoch); err != nil {
			return snap.Map, err
		}
	}
	active := next
	// The ring depends on the cluster names alone: with the same names no
	// name moves, and nothing drains.
	moves := !slices.Equal(sortedNames(cur.Clusters), sortedNames(clusters))
	if moves {
		active.Previous = cur.Clusters
		active.Draining = cur.ClusterNames()
	}
	if snap, err = rs.Store.CompareAndSwap(ctx, snap, active); err != nil {
		return snap.Map, err
	}
	if moves {
		rs.say("epoch %d in force; draining %q", active.Epoch, active.Draining)
	} else {
		rs.say("epoch %d in force; no name moved", active.Epoch)
	}
	return active, nil
}

// allow refuses a change of cur to epoch next past the epoch limit, before
// step 1 writes anything. A pending change that is resumed is held to the
// limit of the run that resumes it.
func (rs *Resharder) allow(cur Map, next uint16) error {
	limit := rs.EpochLimit
	switch {
	case limit == 0:
		limit = MaxJSONSafeEpoch
	case limit > MaxEpoch:
		return fmt.Errorf("%w: epoch limit %d out of range [%d, %d]", ErrInvalidEpoch, limit, MinEpoch, MaxEpoch)
	}
	if next <= limit {
		return nil
	}
	var why string
	switch {
	case limit == MaxEpoch:
		why = fmt.Sprintf("epoch %d is the last a fencing token (an int64) can carry", MaxEpoch)
	case limit == MaxJSONSafeEpoch:
		why = fmt.Sprintf("tokens of epoch %d and above pass 2^53, where clients that read them as JSON numbers "+
			"(JavaScript, k6, the REST API's fencingToken) round them and compare wrong tokens; "+
			"raise the limit only once every such client reads tokens as strings or 64-bit integers", MaxJSONSafeEpoch+1)
	default:
		why = fmt.Sprintf("raise the limit to allow it (at most %d)", MaxEpoch)
	}
	var half string
	if cur.Pending != nil {
		half = fmt.Sprintf(" (a change to epoch %d is pending, left half done: clusters may already refuse enqueues at epoch %d until it finishes)", cur.Pending.Epoch, cur.Epoch)
	}
	return fmt.Errorf("%w: the map is at epoch %d and the epoch limit is %d, so the change to epoch %d is refused%s: %s",
		ErrEpochLimit, cur.Epoch, limit, next, half, why)
}

// checkMapCurrent refuses to start a change while a cluster is past the
// stored map cur: that cluster obeys a newer map than the one stored (the
// home cluster was restored from before the last change), and a change
// built on the stale map could route names away from the clusters where
// their holders are. Clusters behind cur are fine: a new one is at epoch 1.
func (rs *Resharder) checkMapCurrent(ctx context.Context, cur Map, clusters []Cluster) error {
	for _, c := range clusters {
		e, err := rs.clusterEpoch(ctx, c)
		if err != nil {
			return err
		}
		if e > cur.Epoch {
			return fmt.Errorf("%w: cluster %q is at epoch %d, past the stored map's epoch %d: the map is older than the clusters (the home cluster restored from before the last change?); write back the map of epoch %d first",
				ErrEpochConflict, c.Name, e, cur.Epoch, e)
		}
	}
	return nil
}

// clusterEpoch reads the epoch cluster c obeys.
func (rs *Resharder) clusterEpoch(ctx context.Context, c Cluster) (uint16, error) {
	cli, err := rs.dial(c)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	e, err := ReadEpoch(ctx, cli, rs.prefix())
	if err != nil {
		return 0, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return e, nil
}

func (rs *Resharder) bumpCluster(ctx context.Context, c Cluster, to uint16) error {
	cli, err := rs.dial(c)
	if err != nil {
		return err
	}
	defer cli.Close()
	from, err := ReadEpoch(ctx, cli, rs.prefix())
	if err != nil {
		return err
	}
	if from == to {
		return nil
	}
	if from > to {
		return fmt.Errorf("%w: cluster %q is at epoch %d, past %d", ErrEpochConflict, c.Name, from, to)
	}
	if err := BumpEpoch(ctx, cli, rs.prefix(), from, to); err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	rs.say("cluster %q epoch %d → %d", c.Name, from, to)
	return nil
}

// Sweep runs step 4: it checks every draining cluster until it holds no key
// of a name that moved away from it, then records it drained. It returns
// when nothing drains any more, or with ctx's error (the map then still
// lists what drains; run Sweep again).
func (rs *Resharder) Sweep(ctx context.Context, every time.Duration) (Map, error) {
	if rs.Names == nil {
		return Map{}, errors.New("shard: Resharder.Names is not set; Sweep cannot list a draining cluster's names without it")
	}
	for {
		snap, err := rs.Store.Load(ctx)
		if err != nil {
			return Map{}, err
		}
		m := snap.Map
		if len(m.Draining) == 0 {
			if len(m.Previous) == 0 {
				return m, nil
			}
			m.Previous = nil
			_, err := rs.Store.CompareAndSwap(ctx, snap, m)
			if errors.Is(err, ErrMapConflict) {
				continue
			}
			rs.say("epoch %d: draining done", m.Epoch)
			return m, err
		}
		ring, err := m.Ring()
		if err != nil {
			return m, err
		}
		var still []string
		for _, d := range m.Draining {
			moved, err := rs.movedNames(ctx, m, ring, d)
			if err != nil {
				return m, err
			}
			if moved > 0 {
				still = append(still, d)
				continue
			}
			rs.say("cluster %q drained", d)
		}
		if len(still) != len(m.Draining) {
			m.Draining = still
			if _, err := rs.Store.CompareAndSwap(ctx, snap, m); err != nil && !errors.Is(err, ErrMapConflict) {
				return m, err
			}
			continue
		}
		if !clock.Sleep(ctx, clock.Real, every) {
			return m, ctx.Err()
		}
	}
}

// movedNames counts the names on cluster d that the ring maps elsewhere.
func (rs *Resharder) movedNames(ctx context.Context, m Map, ring *Ring, d string) (int, error) {
	i := slices.IndexFunc(m.Previous, func(c Cluster) bool { return c.Name == d })
	if i < 0 {
		return 0, fmt.Errorf("shard: draining cluster %q is not in Previous", d)
	}
	cli, err := rs.dial(m.Previous[i])
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	names, err := rs.Names.ListNames(ctx, cli, rs.prefix())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		if ring.Locate(name) != d {
			n++
		}
	}
	return n, nil
}
