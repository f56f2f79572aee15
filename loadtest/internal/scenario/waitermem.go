package scenario

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/loadtest/internal/layers"
	"github.com/leasegate/leasegate/loadtest/internal/system"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
)

// WaiterChildEnv, when set in the environment, makes the loadtest binary
// (or its test binary) a waiter child: it queues waiters on a gateway as
// the JSON spec in the variable says, and nothing else (RunWaiterChild).
const WaiterChildEnv = "LEASEGATE_LOADTEST_WAITER_CHILD"

// waiterSpec tells a waiter child what to queue.
type waiterSpec struct {
	URL   string `json:"url"`
	Name  string `json:"name"`
	N     int    `json:"n"`
	Own   bool   `json:"own_connections"`
	TTLMs int64  `json:"ttl_ms"`
}

// WaiterMemory is the gateway's memory per queued streaming waiter.
type WaiterMemory struct {
	// Method says how it was measured.
	Method string         `json:"method"`
	Runs   []WaiterMemRun `json:"runs"`
	Notes  []string       `json:"notes,omitempty"`
}

// WaiterMemRun is one variant: every waiter on a connection of its own, or
// all of them on one.
type WaiterMemRun struct {
	Connections string `json:"connections"`
	Waiters     int    `json:"waiters"`
	// HeapB and StackB are the growth of the Go heap's live objects (after
	// a GC) and of goroutine stacks, per waiter; TotalKiB is their sum.
	HeapB    float64 `json:"heap_bytes_per_waiter"`
	StackB   float64 `json:"stack_bytes_per_waiter"`
	TotalKiB float64 `json:"total_kib_per_waiter"`
	// GatewayKiB leaves out the embedded etcd server's share: its heap
	// (by the heap profile) and its goroutines' part of the stacks.
	GatewayKiB float64 `json:"gateway_kib_per_waiter"`
	// RSSKiB is the resident set's growth per waiter (coarse: the Go
	// runtime keeps freed memory for reuse).
	RSSKiB float64 `json:"rss_kib_per_waiter"`
	// Goroutines per waiter, in all and by layer (from the goroutine
	// profile's stacks).
	Goroutines        float64            `json:"goroutines_per_waiter"`
	GoroutinesByLayer map[string]float64 `json:"goroutines_by_layer,omitempty"`
	// HeapByLayerB splits the heap growth per waiter by the layer that
	// allocated it (a sampled heap profile: an estimate).
	HeapByLayerB map[string]float64 `json:"heap_bytes_by_layer,omitempty"`
	Error        string             `json:"error,omitempty"`
}

const waiterMemMethod = "The gateway and the embedded etcd members run in this process; the waiters' clients (the Go SDK, a per-lock streaming Acquire each) " +
	"run in a child process (this binary re-executed), so their memory is not counted. A holder in this process takes the name; the child queues the waiters " +
	"and reports when every one has its place confirmed (the gateway's Queued message). The figures are the growth of this process's live heap " +
	"(runtime/metrics /memory/classes/heap/objects, after two GCs) and goroutine stacks (/memory/classes/heap/stacks) from before the child started to " +
	"that moment, divided by the waiters. That growth includes the embedded etcd server's share (a key, a lease and a watcher per waiter); " +
	"the by-layer split (a heap profile sampled every 4 KiB during the phase, and the goroutine profile) tells the gateway's part from etcd's, " +
	"and *gateway KiB* leaves etcd's out."

// WaiterMemory measures the gateway's memory per queued streaming waiter,
// its connection included (one connection per waiter) and with all
// waiters sharing one connection.
func (e *Env) WaiterMemory(ctx context.Context) (*WaiterMemory, error) {
	out := &WaiterMemory{Method: waiterMemMethod}
	if !e.Bed.Embedded() {
		out.Notes = append(out.Notes, "waiter memory: skipped, the gateway is not in this process")
		return out, nil
	}
	exe, err := os.Executable()
	if err != nil {
		out.Notes = append(out.Notes, fmt.Sprintf("waiter memory: skipped, no executable to re-run: %v", err))
		return out, nil
	}
	for _, own := range []bool{true, false} {
		r, err := e.waiterMem(ctx, exe, own)
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			r.Error = err.Error()
		}
		out.Runs = append(out.Runs, r)
		e.logf("waitermem   %-6s waiters=%-4d %.1f KiB/waiter (heap %.0f B, stacks %.0f B, %.2f goroutines), rss %.1f KiB  %s",
			r.Connections, r.Waiters, r.TotalKiB, r.HeapB, r.StackB, r.Goroutines, r.RSSKiB, r.Error)
		e.settle(ctx)
	}
	return out, ctx.Err()
}

type memSnap struct {
	heap, stacks uint64
	goroutines   uint64
	rss          int64
	// The heap and goroutine profiles, kept encoded (a few KiB) so that
	// the snapshot itself does not count as growth.
	heapProf, gorProf []byte
}

// snapshot reads the process's memory after two GCs, and only then takes
// the profiles, so that neither the earlier snapshot's profiles nor this
// one's count in the figures.
func snapshot() (memSnap, error) {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	metrics.Read(s)
	m := memSnap{heap: s[0].Value.Uint64(), stacks: s[1].Value.Uint64(), goroutines: s[2].Value.Uint64(), rss: testbed.RSS()}
	var err error
	if m.heapProf, err = encoded("heap"); err != nil {
		return m, err
	}
	m.gorProf, err = encoded("goroutine")
	return m, err
}

func encoded(name string) ([]byte, error) {
	var b bytes.Buffer
	err := pprof.Lookup(name).WriteTo(&b, 0)
	return b.Bytes(), err
}

func (e *Env) waiterMem(ctx context.Context, exe string, own bool) (WaiterMemRun, error) {
	n := e.Cfg.MemWaiters
	r := WaiterMemRun{Connections: "shared", Waiters: n}
	if own {
		r.Connections = "own"
	}
	name := fmt.Sprintf("waitermem-%s-%d", r.Connections, time.Now().UnixNano())
	sys, err := system.NewGateway(e.Bed.Gateways, true, time.Minute)
	if err != nil {
		return r, err
	}
	defer sys.Close()
	holder, _ := sys.NewClient(ctx)
	h, err := holder.Acquire(ctx, name, nil)
	if err != nil {
		return r, fmt.Errorf("holder: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = h.Release(rctx)
	}()

	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 4096
	defer func() { runtime.MemProfileRate = rate }()
	before, err := snapshot()
	if err != nil {
		return r, err
	}
	spec, _ := json.Marshal(waiterSpec{URL: e.Bed.Gateways[0], Name: name, N: n, Own: own, TTLMs: time.Minute.Milliseconds()})
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, exe)
	cmd.Env = append(os.Environ(), WaiterChildEnv+"="+string(spec))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return r, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	e.Bar.Start(fmt.Sprintf("waiter memory, %s connections ×%d", r.Connections, n), 0, 0, func() int64 { return 0 })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	e.Bar.Done()
	if err != nil || !strings.HasPrefix(line, "queued") {
		return r, fmt.Errorf("waiter child: %q %v: %s", strings.TrimSpace(line), err, lastLines(stderr.String(), 3))
	}
	e.settle(ctx) // let the transient buffers of the enqueue go
	after, err := snapshot()
	if err != nil {
		return r, err
	}
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	r.HeapB, r.StackB = per(after.heap, before.heap), per(after.stacks, before.stacks)
	r.TotalKiB = (r.HeapB + r.StackB) / 1024
	r.RSSKiB = float64(after.rss-before.rss) / 1024 / float64(n)
	r.Goroutines = per(after.goroutines, before.goroutines)
	if r.GoroutinesByLayer, err = deltaByLayer(after.gorProf, before.gorProf, n); err != nil {
		return r, err
	}
	if r.HeapByLayerB, err = deltaByLayer(after.heapProf, before.heapProf, n); err != nil {
		return r, err
	}
	// The gateway's own share: everything but what the embedded etcd
	// server allocated and the stacks of its goroutines.
	stackShare := 1.0
	if r.Goroutines > 0 {
		stackShare = min(1, max(0, 1-r.GoroutinesByLayer[layers.EtcdSrv]/r.Goroutines))
	}
	r.GatewayKiB = (r.HeapB - r.HeapByLayerB[layers.EtcdSrv] + r.StackB*stackShare) / 1024
	return r, nil
}

// deltaByLayer is (after − before) by layer, per waiter, for layers that
// moved.
func deltaByLayer(after, before []byte, n int) (map[string]float64, error) {
	pa, err := profile.ParseData(after)
	if err != nil {
		return nil, err
	}
	pb, err := profile.ParseData(before)
	if err != nil {
		return nil, err
	}
	a, b := layers.Breakdown(pa), layers.Breakdown(pb)
	out := map[string]float64{}
	for _, l := range layers.Order {
		if d := float64(a[l]-b[l]) / float64(n); d > 0.005 || d < -0.005 {
			out[l] = d
		}
	}
	return out, nil
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(len(ls)-n, 0):], " | ")
}

// RunWaiterChild is a waiter child's whole life: it queues spec's waiters
// (per-lock streaming Acquires of the SDK, each on a connection of its own
// or all on one), writes "queued N" to out once every place is confirmed,
// and ends them when in closes.
func RunWaiterChild(spec string, in io.Reader, out io.Writer) error {
	var s waiterSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return fmt.Errorf("waiter child spec: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var clients []*client.Client
	newClient := func() (*client.Client, error) {
		c, err := client.New([]string{s.URL}, client.WithHTTPClient(h2cClient()), client.WithClientID("loadtest-waiter"))
		if err == nil {
			clients = append(clients, c)
		}
		return c, err
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	shared, err := newClient()
	if err != nil {
		return err
	}
	var (
		queued    atomic.Int64
		allQueued = make(chan struct{})
		failed    = make(chan error, s.N)
		wg        sync.WaitGroup
	)
	for range s.N {
		c := shared
		if s.Own {
			if c, err = newClient(); err != nil {
				return err
			}
		}
		wg.Go(func() {
			l, err := c.Acquire(ctx, s.Name, client.WithTTL(time.Duration(s.TTLMs)*time.Millisecond), client.WithOnQueued(func(int64) {
				if queued.Add(1) == int64(s.N) {
					close(allQueued)
				}
			}))
			if err != nil {
				if ctx.Err() == nil {
					failed <- err
				}
				return
			}
			_ = l.Release(context.Background())
		})
	}
	go func() { _, _ = io.Copy(io.Discard, in); cancel() }()
	select {
	case <-allQueued:
		fmt.Fprintf(out, "queued %d\n", s.N)
	case err := <-failed:
		fmt.Fprintf(out, "failed: %v\n", err)
	case <-ctx.Done():
	}
	<-ctx.Done()
	wg.Wait()
	if queued.Load() != int64(s.N) {
		return errors.New("not every waiter was queued")
	}
	return nil
}
