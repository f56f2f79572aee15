package scenario

import (
	"context"
	"errors"
	"os"

	"github.com/leasegate/leasegate/loadtest/internal/testbed"
)

// pinnedSystems are compared in the pinned scenario: the gateway's three
// ways in, the Mutex Go users of etcd pick today, and the engine floor.
var pinnedSystems = []string{GatewayREST, GatewaySession, GatewayPerLock, Mutex, Direct}

// errNotPinned is Pinned's error on a bed without an etcd process.
var errNotPinned = errors.New("the pinned scenario runs on the pinned setup only (etcd in a process of its own)")

// Pinned measures uncontested acquire+release cycles at saturation —
// Workers clients at once, each on a name of its own — on the pinned
// setup, where etcd runs in a process of its own on CPUs of its own and
// its CPU and raft entries per cycle are read from that process alone.
// The systems run in interleaved rounds on the same names.
func (e *Env) Pinned(ctx context.Context) (*Pinned, error) {
	pin, etcd := e.Bed.Pinned(), e.Bed.EtcdProcess()
	if pin == nil || etcd == nil {
		return nil, errNotPinned
	}
	out := &Pinned{EtcdCPUs: pin.EtcdCPUs.String(), GatewayCPUs: pin.GatewayCPUs.String()}
	names, err := e.Bed.HomeNames(ctx, "p", e.Cfg.Workers)
	if err != nil {
		return nil, err
	}
	systems, notes, err := e.openAll(ctx, pinnedSystems, e.Cfg.Workers)
	if err != nil {
		return nil, err
	}
	out.Notes = append(out.Notes, notes...)
	out.Runs, err = e.cycles(ctx, "pinned", systems, names, e.Cfg.Workers, e.Cfg.Duration)
	if n := e.idleNote("idle"); n != "" {
		out.Notes = append(out.Notes, n)
	}
	// Read back, after the measurement, where the threads of both
	// processes may run and where etcd listens: what the kernel reports,
	// not what was asked.
	var rerr error
	if out.EtcdThreadCPUs, rerr = testbed.ThreadCPUs(etcd.PID()); rerr == nil {
		out.GatewayThreadCPUs, rerr = testbed.ThreadCPUs(os.Getpid())
	}
	if rerr == nil {
		out.EtcdListens, rerr = testbed.ListenAddrs(etcd.PID())
	}
	return out, errors.Join(err, rerr)
}
