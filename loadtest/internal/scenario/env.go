package scenario

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/progress"
	"github.com/leasegate/leasegate/loadtest/internal/system"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
	"github.com/leasegate/leasegate/shard"
)

// System names, in the order results list them.
const (
	Direct          = "direct"
	GatewaySession  = "gateway-session"
	GatewayPerLock  = "gateway-perlock"
	GatewayREST     = "gateway-rest"
	EtcdPut         = "etcd-put"
	Mutex           = "mutex"
	RedsyncAlways   = "redsync-always"
	RedsyncEverysec = "redsync-everysec"
)

// Key prefixes of the baselines on the home etcd, apart from the gateway's.
const (
	directPrefix = "/lgdirect"
	mutexPrefix  = "/lgmutex"
	putPrefix    = "/lgput"
)

// Env is what the scenarios run with.
type Env struct {
	Bed *testbed.Bed
	Cfg Config
	Bar *progress.Bar
	// Log receives one line per phase; nil discards.
	Log io.Writer

	// Prof, when set, profiles every measured window's CPU (see Profiler).
	Prof *Profiler

	// IdleCPU collects, per set of rounds, the CPU seconds per second the
	// process burnt with every system open and idle (see measureIdle).
	IdleCPU []float64
	// EtcdIdleCPU is the same for the bed's etcd process, where it has one.
	EtcdIdleCPU []float64
}

func (e *Env) logf(format string, args ...any) {
	if e.Log != nil {
		fmt.Fprintf(e.Log, format+"\n", args...)
	}
}

// settle pauses between phases (Config.Settle).
func (e *Env) settle(ctx context.Context) { pause(ctx, e.Cfg.Settle) }

// openSystem builds the named system, or returns a note saying why it is
// skipped. poolSize sizes connection pools that need it (Redis).
func (e *Env) openSystem(name string, poolSize int) (system.System, string, error) {
	b := e.Bed
	switch name {
	case GatewaySession:
		g, err := system.NewGateway(b.Gateways, false, e.Cfg.SessionTTL)
		return g, "", err
	case GatewayPerLock:
		g, err := system.NewGateway(b.Gateways, true, e.Cfg.LockTTL)
		return g, "", err
	case GatewayREST:
		return system.NewRESTPerLock(b.Gateways[0], e.Cfg.LockTTL, poolSize), "", nil
	case EtcdPut:
		if len(b.HomeEtcd) == 0 {
			return nil, "etcd-put: skipped, the home etcd is unknown (give --etcd)", nil
		}
		cli, err := shard.DialCluster("home", b.HomeEtcd)
		if err != nil {
			return nil, "", err
		}
		return system.NewPut(cli, putPrefix), "", nil
	case Direct:
		if len(b.HomeEtcd) == 0 {
			return nil, "direct: skipped, the home etcd is unknown (give --etcd)", nil
		}
		cli, err := shard.DialCluster("home", b.HomeEtcd)
		if err != nil {
			return nil, "", err
		}
		d, err := system.NewDirect(cli, directPrefix, e.Cfg.SessionTTL)
		if err != nil {
			_ = cli.Close()
			return nil, "", err
		}
		return &closingDirect{Direct: d, close: cli.Close}, "", nil
	case Mutex:
		if len(b.HomeEtcd) == 0 {
			return nil, "mutex: skipped, the home etcd is unknown (give --etcd)", nil
		}
		m, err := system.NewMutex(b.HomeEtcd, mutexPrefix, e.Cfg.SessionTTL)
		return m, "", err
	case RedsyncAlways, RedsyncEverysec:
		fsync := "always"
		note := "appendfsync always (every write fsynced before the reply)"
		if name == RedsyncEverysec {
			fsync = "everysec"
			note = "appendfsync everysec (up to a second of acknowledged writes lost on a crash)"
		}
		r, ok := b.Redis[fsync]
		if !ok {
			return nil, name + ": skipped, no redis-server (see the notes)", nil
		}
		return system.NewRedsync(name, note, r.Addr, e.Cfg.LockTTL, poolSize+8), "", nil
	}
	return nil, "", fmt.Errorf("unknown system %q", name)
}

// closingDirect closes the etcd client Direct runs on, after Direct.
type closingDirect struct {
	*system.Direct
	close func() error
}

func (d *closingDirect) Close() error {
	_ = d.Direct.Close()
	return d.close()
}

// extraCPU returns the CPU of processes a system runs outside this one
// (redis-server), to add to this process's.
func (e *Env) extraCPU(name string) func() time.Duration {
	var r *testbed.Redis
	switch name {
	case RedsyncAlways:
		r = e.Bed.Redis["always"]
	case RedsyncEverysec:
		r = e.Bed.Redis["everysec"]
	}
	if r == nil {
		return func() time.Duration { return 0 }
	}
	return r.CPU
}

// openClients makes n clients of sys, 16 at a time.
func openClients(ctx context.Context, sys system.System, n int) ([]system.Client, error) {
	cs := make([]system.Client, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range cs {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			c, err := sys.NewClient(ctx)
			cs[i] = c
			errs <- err
		}()
	}
	var first error
	for range cs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		closeClients(cs)
		return nil, fmt.Errorf("%s: open %d clients: %w", sys.Name(), n, first)
	}
	return cs, nil
}

// closeClients closes every client, 16 at a time, within 30 s.
func closeClients(cs []system.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sem := make(chan struct{}, 16)
	done := make(chan struct{}, len(cs))
	for _, c := range cs {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; done <- struct{}{} }()
			if c != nil {
				_ = c.Close(ctx)
			}
		}()
	}
	for range cs {
		<-done
	}
}
