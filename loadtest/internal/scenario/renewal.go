package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/system"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
)

// renewMode is one way of holding K locks.
type renewMode struct {
	system  string
	locks   int
	perLock bool
}

// Renewal holds K locks for a window in each mode — gateway sessions (at K
// and 5K locks, to show that renewal cost does not follow the lock count),
// gateway per-lock leases, and concurrency.Mutex on sessions — and counts
// the keepalives that reach etcd (its own lease-renewal counter) and the
// process CPU they cost.
func (e *Env) Renewal(ctx context.Context) (*Renewal, error) {
	k := e.Cfg.RenewLocks
	out := &Renewal{Scope: e.Bed.KeepaliveScope()}
	if _, err := e.Bed.Keepalives(ctx); err != nil {
		out.Notes = append(out.Notes, fmt.Sprintf("renewal: skipped, etcd's counters cannot be read: %v", err))
		return out, nil
	}
	modes := []renewMode{
		{system: GatewaySession, locks: k},
		{system: GatewaySession, locks: 5 * k},
		{system: GatewayPerLock, locks: k, perLock: true},
		{system: Mutex, locks: k},
	}
	for _, m := range modes {
		r, note, err := e.renewal(ctx, m)
		if err != nil {
			return nil, err
		}
		if note != "" {
			out.Notes = append(out.Notes, note)
			continue
		}
		out.Runs = append(out.Runs, r)
		e.logf("renewal     %-17s locks=%-6d clients=%-3d %7.2f keepalives/s (%.5f per lock; bound %.5f)  cpu %.3f s/s  lost %d",
			m.system, r.Locks, r.Clients, r.KeepalivesPerSec, r.PerLock, r.Bound, r.CPUPerSec, r.Lost)
		e.settle(ctx)
	}
	return out, ctx.Err()
}

func (e *Env) renewal(ctx context.Context, m renewMode) (RenewalRun, string, error) {
	cfg := e.Cfg
	var sys system.System
	var err error
	var note string
	switch m.system {
	case GatewaySession, GatewayPerLock:
		sys, err = system.NewGateway(e.Bed.Gateways, m.perLock, cfg.RenewTTL)
	case Mutex:
		if len(e.Bed.HomeEtcd) == 0 {
			return RenewalRun{}, "renewal mutex: skipped, the home etcd is unknown", nil
		}
		sys, err = system.NewMutex(e.Bed.HomeEtcd, mutexPrefix, cfg.RenewTTL)
	}
	if err != nil || sys == nil {
		return RenewalRun{}, note, err
	}
	defer sys.Close()
	cs, err := openClients(ctx, sys, cfg.RenewClients)
	if err != nil {
		return RenewalRun{}, "", err
	}
	r := RenewalRun{Mode: m.system, Clients: cfg.RenewClients, Locks: m.locks, TTLs: cfg.RenewTTL.Seconds()}
	var errs errSamples
	t0 := time.Now()
	held := e.holdMany(ctx, cs, m, &errs)
	r.AcquireSeconds = time.Since(t0).Seconds()
	defer e.releaseMany(cs, held, m.perLock)
	if ctx.Err() != nil {
		return r, "", ctx.Err()
	}
	w := e.renewWindow()
	e.Bar.Start(fmt.Sprintf("renewal %s %d locks", m.system, m.locks), w, 0, func() int64 { return int64(len(held)) })
	k0, err := e.Bed.Keepalives(ctx)
	if err != nil {
		e.Bar.Done()
		return r, "", err
	}
	w0 := readCounts(e.Bed)
	cpu0 := testbed.CPU()
	e.Prof.start(fmt.Sprintf("renewal %s %d locks (per keepalive)", m.system, m.locks))
	pause(ctx, w)
	k1, err := e.Bed.Keepalives(ctx)
	cpu1 := testbed.CPU()
	e.Prof.stop(int64(k1 - k0))
	e.Bar.Done()
	if err != nil {
		return r, "", err
	}
	r.WindowSeconds = w.Seconds()
	r.Keepalives = k1 - k0
	r.KeepalivesPerSec = r.Keepalives / w.Seconds()
	r.Locks = len(held)
	if r.Locks > 0 {
		r.PerLock = r.KeepalivesPerSec / float64(r.Locks)
		r.Bound = float64(r.Clients) / float64(r.Locks)
	}
	r.CPUPerSec = (cpu1 - cpu0).Seconds() / w.Seconds()
	if w1 := readCounts(e.Bed); w0.ok && w1.ok {
		r.WritesPerSec = (w1.writes - w0.writes) / w.Seconds()
	}
	for _, h := range held {
		if l, ok := h.(interface{ Err() error }); ok && l.Err() != nil {
			r.Lost++
		}
	}
	r.Errors = errs.n.Load()
	if len(errs.msg) > 0 {
		r.Note = "errors: " + errs.msg[0]
	}
	return r, "", nil
}

// holdMany acquires m.locks distinct names over the clients, 64 at a time.
func (e *Env) holdMany(ctx context.Context, cs []system.Client, m renewMode, errs *errSamples) []system.Held {
	var (
		mu   sync.Mutex
		held = make([]system.Held, 0, m.locks)
		next atomic.Int64
		wg   sync.WaitGroup
	)
	prefix := fmt.Sprintf("r%d-%s", time.Now().UnixNano()%1e6, m.system)
	e.Bar.Start(fmt.Sprintf("renewal %s: taking %d locks", m.system, m.locks), 0, int64(m.locks), func() int64 { return next.Load() })
	defer e.Bar.Done()
	for range min(64, m.locks) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(m.locks) {
					return
				}
				h, err := cs[int(i)%len(cs)].Acquire(ctx, fmt.Sprintf("%s-%d", prefix, i), nil)
				if err != nil {
					errs.add(err)
					continue
				}
				mu.Lock()
				held = append(held, h)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return held
}

// releaseMany gives the locks back: one by one for per-lock leases, by
// closing the sessions otherwise.
func (e *Env) releaseMany(cs []system.Client, held []system.Held, perLock bool) {
	if perLock {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(64, len(held)) {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(len(held)) {
						return
					}
					if err := held[i].Release(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
						continue
					}
				}
			})
		}
		wg.Wait()
	}
	closeClients(cs)
}

// renewWindow is Config.RenewWindow, or by default Duration but at least
// two renew intervals (TTL/3 each) and a second.
func (e *Env) renewWindow() time.Duration {
	if e.Cfg.RenewWindow > 0 {
		return e.Cfg.RenewWindow
	}
	return max(e.Cfg.Duration, 2*e.Cfg.RenewTTL/3+time.Second)
}
