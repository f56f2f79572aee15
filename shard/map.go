package shard

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
)

// tokenEpochShift is the bit position of the epoch in a fencing token,
// epoch<<48 | revision in an int64. The token's layout is package queue's
// (queue.Token, queue.EpochShift); shard cannot import the lock engine, so
// it states the two bounds the layout puts on an epoch, and
// TestMaxJSONSafeEpoch holds them to queue's.
const tokenEpochShift = 48

// Epoch bounds. A fencing token is epoch<<48 | revision in an int64, so
// the epoch must stay below 2^15 for tokens to stay positive. JSON clients that read tokens as IEEE doubles lose precision
// above 2^53, i.e. from epoch 32 on; past that they must read the token's
// string form. A map change refuses to pass MaxJSONSafeEpoch unless the
// operator raises the limit ([Resharder].EpochLimit).
const (
	// MinEpoch is the first epoch of a deployment.
	MinEpoch uint16 = 1
	// MaxEpoch is the last epoch that keeps fencing tokens positive: the
	// hard cap, equal to queue.MaxEpoch.
	MaxEpoch uint16 = 1<<(63-tokenEpochShift) - 1
	// MaxJSONSafeEpoch (31) is the last epoch whose tokens are exact as
	// JSON numbers: its largest token is 2^53-1.
	MaxJSONSafeEpoch uint16 = (1<<53 - 1) >> tokenEpochShift
)

// Cluster is one etcd cluster of the shard map.
type Cluster struct {
	// Name identifies the cluster in the ring, in lock ids and in metrics.
	// Renaming a cluster moves its names: it is a resharding.
	Name string `json:"name"`
	// Endpoints are the members' client URLs (http:// or https://).
	Endpoints []string `json:"endpoints"`
}

// Map is the shard map: which clusters names are hashed over, under which
// epoch, and the state of a change in progress. It is stored as JSON in the
// home cluster (see [Store]); the JSON field names are part of the format.
// A change from epoch e to e+1 goes through it by [Resharder]'s steps.
type Map struct {
	// Epoch numbers the map; it only grows. Range [MinEpoch, MaxEpoch].
	Epoch uint16 `json:"epoch"`
	// Clusters are the clusters names are hashed over (by [Ring]).
	Clusters []Cluster `json:"clusters"`
	// Pending is the next map, learned by gateways but not yet routed by.
	// Its epoch is Epoch+1; it may not itself have a pending map.
	Pending *Map `json:"pending,omitempty"`
	// Previous are the clusters of epoch Epoch-1, kept while any of them is
	// draining, so that a gateway that never saw that map can still find a
	// name's previous owner (Ring over Previous) and reach it, even if it
	// was removed.
	Previous []Cluster `json:"previous,omitempty"`
	// Draining names the clusters of Previous that may still hold keys of
	// names that moved away from them. A moved name is granted on its new
	// cluster only once its previous owner holds none of its keys.
	Draining []string `json:"draining,omitempty"`
}

// Validate reports the first thing wrong with m, naming the bad value:
// epoch out of range, no clusters, an empty or duplicate cluster name, a
// cluster without endpoints or with an endpoint that is not an http(s) URL,
// a pending map that is not for epoch Epoch+1 or is invalid itself, or a
// draining cluster missing from Previous. Errors wrap [ErrInvalidMap].
func (m Map) Validate() error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidMap, err)
	}
	return nil
}

func (m Map) validate() error {
	if m.Epoch < MinEpoch || m.Epoch > MaxEpoch {
		return fmt.Errorf("epoch %d out of range [%d, %d]", m.Epoch, MinEpoch, MaxEpoch)
	}
	if len(m.Clusters) == 0 {
		return fmt.Errorf("epoch %d: no clusters", m.Epoch)
	}
	if err := validateClusters(m.Clusters); err != nil {
		return fmt.Errorf("epoch %d: %w", m.Epoch, err)
	}
	if len(m.Previous) > 0 {
		if err := validateClusters(m.Previous); err != nil {
			return fmt.Errorf("epoch %d: previous: %w", m.Epoch, err)
		}
	}
	seen := map[string]bool{}
	for _, name := range m.Draining {
		switch {
		case seen[name]:
			return fmt.Errorf("epoch %d: draining cluster %q listed twice", m.Epoch, name)
		case !slices.ContainsFunc(m.Previous, func(c Cluster) bool { return c.Name == name }):
			return fmt.Errorf("epoch %d: draining cluster %q is not among the previous clusters %q", m.Epoch, name, names(m.Previous))
		}
		seen[name] = true
	}
	if p := m.Pending; p != nil {
		if p.Epoch != m.Epoch+1 {
			return fmt.Errorf("epoch %d: pending map has epoch %d, want %d", m.Epoch, p.Epoch, m.Epoch+1)
		}
		if p.Pending != nil {
			return fmt.Errorf("epoch %d: pending map has a pending map itself (epoch %d)", m.Epoch, p.Pending.Epoch)
		}
		if err := p.validate(); err != nil {
			return fmt.Errorf("pending: %w", err)
		}
	}
	return nil
}

func validateClusters(cs []Cluster) error {
	seen := map[string]bool{}
	for i, c := range cs {
		switch {
		case c.Name == "":
			return fmt.Errorf("cluster %d has an empty name", i)
		case seen[c.Name]:
			return fmt.Errorf("cluster %q listed twice", c.Name)
		case len(c.Endpoints) == 0:
			return fmt.Errorf("cluster %q has no endpoints", c.Name)
		}
		seen[c.Name] = true
		for _, e := range c.Endpoints {
			u, err := url.Parse(e)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("cluster %q endpoint %q is not an http:// or https:// URL with a host", c.Name, e)
			}
		}
	}
	return nil
}

func names(cs []Cluster) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// ClusterNames returns the names of m.Clusters, in map order.
func (m Map) ClusterNames() []string { return names(m.Clusters) }

// Cluster returns the cluster called name among m.Clusters and, failing
// that, m.Previous (a removed cluster that is still draining).
func (m Map) Cluster(name string) (Cluster, bool) {
	for _, cs := range [][]Cluster{m.Clusters, m.Previous} {
		if i := slices.IndexFunc(cs, func(c Cluster) bool { return c.Name == name }); i >= 0 {
			return cs[i], true
		}
	}
	return Cluster{}, false
}

// Ring returns the ring over m.Clusters.
func (m Map) Ring() (*Ring, error) { return NewRing(m.ClusterNames()) }

// PreviousRing returns the ring over m.Previous, or nil if m keeps no
// previous clusters (no change is draining).
func (m Map) PreviousRing() (*Ring, error) {
	if len(m.Previous) == 0 {
		return nil, nil
	}
	return NewRing(names(m.Previous))
}

// Marshal returns m's stored form (JSON) after validating it.
func (m Map) Marshal() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// UnmarshalMap parses and validates a stored map.
func UnmarshalMap(data []byte) (Map, error) {
	var m Map
	if err := json.Unmarshal(data, &m); err != nil {
		return Map{}, fmt.Errorf("%w: %w", ErrInvalidMap, err)
	}
	if err := m.Validate(); err != nil {
		return Map{}, err
	}
	return m, nil
}
