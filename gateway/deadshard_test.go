package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/netfault"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/shard"
)

// deadBound is how soon a call on a dead shard must be answered. The
// default request timeout is 10 s; a call whose context ends at deadBound
// and still reads unavailable was answered by the gateway before then.
const deadBound = 2500 * time.Millisecond

// deadShard is a fleet of two clusters, c0 and c1, with a gateway over
// both at its default settings, and a way to make c1 unreachable.
type deadShard struct {
	g    *gw
	f    *fleet
	kill func()
	// halfOpen counts c1's breaker entering half-open: each is a probe.
	halfOpen *atomic.Int32
}

// deadShardKinds are the ways a cluster becomes unreachable: its member
// stopped (connections refused), an address nothing ever listened on, and
// a link that holds every packet while the connection stays open.
func deadShardKinds(t *testing.T) map[string]func(t *testing.T) *deadShard {
	start := func(t *testing.T, c1 server.Cluster, f *fleet) *deadShard {
		d := &deadShard{f: f, halfOpen: new(atomic.Int32)}
		bc := shard.DefaultBreakerConfig() // default timing; only observed
		bc.OnStateChange = func(cluster string, _, to shard.State) {
			if cluster == "c1" && to == shard.StateHalfOpen {
				d.halfOpen.Add(1)
			}
		}
		d.g = gwtest.Start(t, nil, gwtest.Prefix(f.prefix), gwtest.Clusters(f.cluster(0), c1),
			gwtest.Configure(func(c *server.Config) { c.Fleet.Breaker = bc }))
		return d
	}
	return map[string]func(t *testing.T) *deadShard{
		"stopped": func(t *testing.T) *deadShard {
			f := startFleet(t, 2)
			d := start(t, f.cluster(1), f)
			d.kill = f.etcds[1].Stop
			return d
		},
		"closed port": func(t *testing.T) *deadShard {
			f := startFleet(t, 1)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			d := start(t, server.Cluster{Name: "c1", Endpoints: []string{"http://" + addr}}, f)
			d.kill = func() {}
			return d
		},
		"blackholed": func(t *testing.T) *deadShard {
			f := startFleet(t, 2)
			link, err := netfault.New("c1", strings.TrimPrefix(f.etcds[1].Endpoint(), "http://"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { link.Close() })
			d := start(t, server.Cluster{Name: "c1", Endpoints: []string{link.URL()}}, f)
			d.kill = func() { link.Set(netfault.Fault{Blackhole: true}) }
			return d
		},
	}
}

// wantShardUnavailable fails the test unless err is the gateway's
// unavailable answer naming shard c1.
func wantShardUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if codeOf(err) != connect.CodeUnavailable || reasonOf(err) != "SHARD_UNAVAILABLE" || !strings.Contains(err.Error(), `"c1"`) {
		t.Fatalf("%s = %v (reason %q); want unavailable, SHARD_UNAVAILABLE, naming shard \"c1\", within %s", what, err, reasonOf(err), deadBound)
	}
}

// With the default settings, every call on a name whose cluster cannot be
// reached answers unavailable, naming the shard, well within the request
// timeout: from the first call, while the breaker is closed, open and
// probing (a probe costs its caller no more than the others), over Connect
// and REST alike; and the healthy shard's names are served all along.
func TestDeadShardAnswersFastWithDefaults(t *testing.T) {
	t.Parallel()
	for kind, setup := range deadShardKinds(t) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			d := setup(t)
			names := namesOn([]string{"c0", "c1"}, 64, "dead")
			d.kill()
			try := func(i int) error {
				ctx, cancel := context.WithTimeout(context.Background(), deadBound)
				defer cancel()
				resp, err := d.g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: names["c1"][i%64], TtlMs: 5000}))
				if err == nil {
					return fmt.Errorf("acquired %v on the dead shard", resp.Msg)
				}
				return err
			}
			// The first call, through the SDK at its defaults (it retries
			// an unavailable answer): the shard is named, not the gateway.
			sctx, scancel := context.WithTimeout(context.Background(), deadBound)
			_, err := d.g.SDK(t).TryAcquire(sctx, names["c1"][63])
			expired := sctx.Err() != nil
			scancel()
			if expired || !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), `"c1"`) || strings.Contains(err.Error(), "no gateway available") {
				t.Fatalf("SDK TryAcquire on the dead shard = %v (its context expired: %v); want ErrUnavailable naming shard \"c1\" and not the gateway, within %s", err, expired, deadBound)
			}
			// The next calls, until the breaker opens.
			for i := range int(shard.DefaultBreakerConfig().ConsecutiveFailures) + 1 {
				wantShardUnavailable(t, fmt.Sprintf("TryAcquire %d on the dead shard", i), try(i))
			}
			// Through two half-open probes: no call waits longer.
			deadline := time.Now().Add(30 * time.Second)
			for i := 0; d.halfOpen.Load() < 2; i++ {
				if time.Now().After(deadline) {
					t.Fatalf("the breaker probed %d times in 30 s; want 2", d.halfOpen.Load())
				}
				wantShardUnavailable(t, "TryAcquire while the breaker probes", try(i))
				time.Sleep(50 * time.Millisecond) // calls spread over the probes' schedule
			}
			// REST: 503, naming the shard.
			ctx, cancel := context.WithTimeout(context.Background(), deadBound)
			defer cancel()
			body, _ := json.Marshal(map[string]any{"name": names["c1"][0], "ttlMs": 5000})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.g.URL+"/api/v1/locks/acquire", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := d.g.HTTP.Do(req)
			if err != nil {
				t.Fatalf("REST acquire on the dead shard: %v; want 503 within %s", err, deadBound)
			}
			var out struct {
				Error struct{ Message string } `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(out.Error.Message, `"c1"`) {
				t.Fatalf("REST acquire on the dead shard = %d %q; want 503 naming shard \"c1\"", resp.StatusCode, out.Error.Message)
			}
			// The healthy shard serves.
			for _, n := range names["c0"][:5] {
				ctx, cancel := context.WithTimeout(context.Background(), deadBound)
				r, err := d.g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: n, TtlMs: 5000}))
				cancel()
				if err != nil || !r.Msg.Acquired {
					t.Fatalf("TryAcquire(%q) on the healthy shard = %v, %v", n, r, err)
				}
			}
		})
	}
}

// With the default settings, a session loses only what lived on the dead
// shard: it opens while the shard is down, its renewals go on for the
// healthy shard, and a lock there outlives the dead shard's by as long as
// anyone cares to look (here, past two TTLs after the dead shard's lock
// was lost), while the dead shard's lock is lost at its deadline.
func TestDeadShardCostsASessionOnlyItsLocks(t *testing.T) {
	t.Parallel()
	for kind, setup := range deadShardKinds(t) {
		if kind == "closed port" {
			continue // a session cannot hold a lock there to lose
		}
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			d := setup(t)
			names := namesOn([]string{"c0", "c1"}, 2, "sess")
			sdk := d.g.SDK(t) // the SDK's defaults
			ctx := ctxT(t)
			const ttl = 3 * time.Second // a session's renewal then has TTL/4 to be answered
			s, err := sdk.OpenSession(ctx, client.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			l0, err := s.TryAcquire(ctx, names["c0"][0])
			if err != nil {
				t.Fatal(err)
			}
			l1, err := s.TryAcquire(ctx, names["c1"][0])
			if err != nil {
				t.Fatal(err)
			}
			d.kill()

			// A session opens while c1 is down, on c0.
			octx, cancel := context.WithTimeout(ctx, deadBound+time.Second)
			s2, err := sdk.OpenSession(octx, client.WithTTL(ttl))
			cancel()
			if err != nil {
				t.Fatalf("OpenSession with c1 down = %v; want a session on c0", err)
			}
			if got := s2.Shards(); len(got) != 1 || got[0] != "c0" {
				t.Errorf("OpenSession with c1 down holds leases on %v; want [c0]", got)
			}
			_ = s2.Close(context.Background())

			// c1's lock is lost at its deadline, c0's is not.
			select {
			case <-l1.Done():
			case <-l0.Done():
				t.Fatalf("the lock on the healthy shard was lost with c1 down: %v", l0.Err())
			case <-time.After(3 * ttl):
				t.Fatalf("the lock on the dead shard still believed held %s after c1 went down", 3*ttl)
			}
			if !errors.Is(l1.Err(), client.ErrUnavailable) && !errors.Is(l1.Err(), client.ErrSessionLost) {
				t.Logf("the dead shard's lock ended with %v", l1.Err())
			}
			lost := time.Now()
			// Await renewals of c0 until it is confirmed two TTLs past the loss.
			for l0.Expires().Before(lost.Add(2 * ttl)) {
				select {
				case <-l0.Done():
					t.Fatalf("the lock on the healthy shard was lost %s after c1's: %v", time.Since(lost), l0.Err())
				case <-time.After(100 * time.Millisecond):
				}
				if time.Since(lost) > 4*ttl {
					t.Fatalf("the lock on the healthy shard was not renewed past %s in %s", lost.Add(2*ttl), 4*ttl)
				}
			}
			if err := s.Err(); err != nil {
				t.Fatalf("the session ended with c1 down: %v", err)
			}
		})
	}
}
