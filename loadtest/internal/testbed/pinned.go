package testbed

import (
	"context"
	"fmt"
	"slices"

	"github.com/leasegate/leasegate/internal/server"
)

// pinnedShard is the name the gateway knows the etcd process's cluster by.
const pinnedShard = "shard-0"

// resolve checks p against the CPUs this process may use and fills in
// GatewayCPUs' default.
func (p Pin) resolve() (Pin, error) {
	allowed, err := AllowedCPUs()
	if err != nil {
		return p, err
	}
	if len(allowed) < 2 {
		return p, fmt.Errorf("%w (etcd on its own, the gateway and load generator on the rest); this process may use %d: %s", ErrTooFewCPUs, len(allowed), allowed)
	}
	if len(p.GatewayCPUs) == 0 {
		p.GatewayCPUs = allowed.Without(p.EtcdCPUs)
	}
	switch {
	case len(p.EtcdCPUs) == 0 || len(p.GatewayCPUs) == 0:
		return p, fmt.Errorf("etcd CPUs [%s] / gateway CPUs [%s]: want at least one CPU each, out of %s", p.EtcdCPUs, p.GatewayCPUs, allowed)
	case len(p.EtcdCPUs.Without(allowed)) > 0 || len(p.GatewayCPUs.Without(allowed)) > 0:
		return p, fmt.Errorf("etcd CPUs %s / gateway CPUs %s: want CPUs this process may use, out of %s", p.EtcdCPUs, p.GatewayCPUs, allowed)
	case slices.ContainsFunc(p.EtcdCPUs, func(c int) bool { return slices.Contains(p.GatewayCPUs, c) }):
		return p, fmt.Errorf("etcd CPUs %s and gateway CPUs %s overlap: want disjoint sets", p.EtcdCPUs, p.GatewayCPUs)
	}
	return p, nil
}

// startPinned pins this process to the gateway's CPUs, starts the etcd
// process on etcd's and a gateway in this process over it, on 127.0.0.1.
func (b *Bed) startPinned(ctx context.Context, p Pin) error {
	p, err := p.resolve()
	if err != nil {
		return err
	}
	if b.unpin, err = PinSelf(p.GatewayCPUs); err != nil {
		return err
	}
	b.pin = &p
	fmt.Fprintf(b.log, "starting an etcd process on CPU %s and a gateway on CPU %s\n", p.EtcdCPUs, p.GatewayCPUs)
	if b.etcd, err = StartEtcdProcess(ctx, p.EtcdCPUs, b.log); err != nil {
		return err
	}
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Clusters = []server.Cluster{{Name: pinnedShard, Endpoints: []string{b.etcd.Endpoint}}}
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("pinned setup: %w", err)
	}
	b.srv = srv
	b.Gateways = []string{srv.URL()}
	b.HomeShard, b.HomeEtcd = pinnedShard, []string{b.etcd.Endpoint}
	b.Clusters[pinnedShard] = b.HomeEtcd
	return nil
}
