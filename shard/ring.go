package shard

import (
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Ring maps lock names onto clusters by rendezvous (highest-random-weight)
// hashing: a name belongs to the cluster whose score
//
//	xxhash64(clusterName + "\x00" + lockName)
//
// is highest (xxhash64 is XXH64 with seed 0, as in github.com/cespare/xxhash/v2).
// Ties, which need a 64-bit collision, go to the lexically smaller cluster
// name. The score depends only on the two names, so every process, whatever
// order it lists the clusters in, routes a name to the same cluster. That is
// part of the wire contract between gateway replicas: changing the formula
// is a resharding of every name.
//
// Rendezvous hashing is balanced without virtual nodes, and adding a cluster
// to N moves only the ~1/(N+1) of names that the new cluster wins; every
// moved name moves to the new cluster. Removing a cluster moves only its own
// names. Locate costs one hash of the name per cluster, which is cheap for
// the handful of clusters a deployment has.
//
// A Ring is immutable and safe for concurrent use.
type Ring struct {
	names []string
	// seeds[i] is a digest that has already absorbed names[i] and the 0
	// separator: Locate copies it and only hashes the lock name.
	seeds []xxhash.Digest
}

// NewRing returns a ring over the named clusters. It fails if the list is
// empty, or a name is empty or listed twice; the error names the bad value.
// The order of clusters does not matter.
func NewRing(clusters []string) (*Ring, error) {
	if len(clusters) == 0 {
		return nil, fmt.Errorf("shard: ring needs at least one cluster, got none")
	}
	names := slices.Clone(clusters)
	slices.Sort(names)
	for i, n := range names {
		if n == "" {
			return nil, fmt.Errorf("shard: ring cluster name is empty (clusters %q)", clusters)
		}
		if i > 0 && names[i-1] == n {
			return nil, fmt.Errorf("shard: ring cluster %q is listed twice", n)
		}
	}
	r := &Ring{names: names, seeds: make([]xxhash.Digest, len(names))}
	for i, n := range names {
		d := &r.seeds[i]
		d.Reset()
		d.WriteString(n)
		d.Write([]byte{0})
	}
	return r, nil
}

// Locate returns the cluster that owns name. It never allocates.
func (r *Ring) Locate(name string) string {
	best, bestScore := 0, uint64(0)
	for i := range r.seeds {
		d := r.seeds[i] // copy: the seed stays reusable
		d.WriteString(name)
		// Names are sorted, so ">" keeps the smaller name on a tie.
		if s := d.Sum64(); i == 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return r.names[best]
}

// Clusters returns the ring's cluster names in sorted order. The slice is a
// copy.
func (r *Ring) Clusters() []string { return slices.Clone(r.names) }

// Score is the rendezvous weight of (cluster, name): the XXH64 of cluster,
// one 0 byte and name. It is exported so that tools and tests in other
// languages can check their routing against this one.
func Score(cluster, name string) uint64 {
	d := xxhash.New()
	d.WriteString(cluster)
	d.Write([]byte{0})
	d.WriteString(name)
	return d.Sum64()
}
