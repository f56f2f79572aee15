package gateway_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/shard"
)

const (
	live        = v1.ShardLeaseState_SHARD_LEASE_STATE_LIVE
	lost        = v1.ShardLeaseState_SHARD_LEASE_STATE_LOST
	unavailable = v1.ShardLeaseState_SHARD_LEASE_STATE_UNAVAILABLE
)

// namesOn returns n lock names that the ring over shards places on each
// shard, keyed by shard.
func namesOn(shards []string, n int, prefix string) map[string][]string {
	ring, _ := shard.NewRing(shards)
	out := map[string][]string{}
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		s := ring.Locate(name)
		if len(out[s]) < n {
			out[s] = append(out[s], name)
		}
		full := true
		for _, sh := range shards {
			full = full && len(out[sh]) >= n
		}
		if full {
			return out
		}
	}
}

// states maps each shard of a session call's answer to its state.
func states(shards []*v1.SessionShard) map[string]v1.ShardLeaseState {
	out := map[string]v1.ShardLeaseState{}
	for _, s := range shards {
		out[s.Shard] = s.State
	}
	return out
}

func wantStates(t *testing.T, what string, got []*v1.SessionShard, want map[string]v1.ShardLeaseState) {
	t.Helper()
	g := states(got)
	if len(g) != len(want) {
		t.Fatalf("%s: shard outcomes %v; want %v", what, g, want)
	}
	for sh, st := range want {
		if g[sh] != st {
			t.Fatalf("%s: shard outcomes %v; want %v", what, g, want)
		}
	}
	for _, s := range got {
		if s.State == live && (s.ValidForMs <= 0 || s.TtlMs <= 0 || s.ExpiresAt == nil) {
			t.Fatalf("%s: live shard %s without its validity: %v", what, s.Shard, s)
		}
	}
}

// shardOf returns the shard named in a gateway error's ErrorInfo metadata.
func shardOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.Metadata["shard"]
			}
		}
	}
	return ""
}

// sessionTry takes name in session id, failing the test unless granted.
func sessionTry(t *testing.T, g *gw, id, name string) *v1.Granted {
	t.Helper()
	resp, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: name, SessionId: id, ClientId: "sess"}))
	if err != nil || !resp.Msg.Acquired {
		t.Fatalf("TryAcquire(%q) in a session = %v, %v; want acquired", name, resp, err)
	}
	return resp.Msg.Granted
}

// A session spans every shard, but its leases live and die shard by shard:
// a stopped shard neither blocks opening a session nor stops the renewal of
// locks on the healthy shards, and when its lease lapses only its own locks
// are lost. A shard the session lacks gets a distinct, actionable answer,
// and the session can be extended to it once it is back.
func TestSessionDegradesPerShard(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2)
	bc := shard.DefaultBreakerConfig()
	bc.ConsecutiveFailures = 3
	bc.OpenTimeout = 200 * time.Millisecond
	g := f.gateway(t, func(c *server.Config) {
		c.Fleet.Breaker = bc
		c.Fleet.RequestTimeout = 500 * time.Millisecond
	}, 0, 1)
	ctx := ctxT(t)
	names := namesOn([]string{"c0", "c1"}, 3, "sess")

	s1, err := g.Client.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: "sess", TtlMs: 10000}))
	if err != nil {
		t.Fatal(err)
	}
	wantStates(t, "OpenSession with both shards up", s1.Msg.Shards, map[string]v1.ShardLeaseState{"c0": live, "c1": live})
	onC0 := sessionTry(t, g, s1.Msg.SessionId, names["c0"][0])
	onC1 := sessionTry(t, g, s1.Msg.SessionId, names["c1"][0])

	f.etcds[1].Stop()

	// Renewal goes on for c0 while c1 is down, call after call.
	for i := range 3 {
		ka, err := g.Client.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: s1.Msg.SessionId}))
		if err != nil {
			t.Fatalf("KeepAliveSession %d with c1 down = %v; want c0 renewed", i, err)
		}
		wantStates(t, "KeepAliveSession with c1 down", ka.Msg.Shards, map[string]v1.ShardLeaseState{"c0": live, "c1": unavailable})
		// A client that reads only the top-level fields must not take
		// c0's renewal for c1's.
		if ka.Msg.ValidForMs != 0 || ka.Msg.TtlMs != 0 || ka.Msg.ExpiresAt != nil {
			t.Fatalf("KeepAliveSession top-level valid_for_ms %d, ttl_ms %d, expires_at %v with c1 unconfirmed; want unset", ka.Msg.ValidForMs, ka.Msg.TtlMs, ka.Msg.ExpiresAt)
		}
	}
	// The lock on c0 is held and renewable all along.
	if _, err := g.Client.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: onC0.LockId, FencingToken: onC0.FencingToken})); err != nil {
		t.Fatalf("Renew of the c0 lock with c1 down = %v", err)
	}

	// A session opens while c1 is down, covering c0.
	s2, err := g.Client.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: "sess", TtlMs: 10000}))
	if err != nil {
		t.Fatalf("OpenSession with c1 down = %v; want a session on c0", err)
	}
	wantStates(t, "OpenSession with c1 down", s2.Msg.Shards, map[string]v1.ShardLeaseState{"c0": live, "c1": unavailable})
	sessionTry(t, g, s2.Msg.SessionId, names["c0"][1])
	_, err = g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: names["c1"][1], SessionId: s2.Msg.SessionId}))
	if codeOf(err) != connect.CodeFailedPrecondition || reasonOf(err) != "SESSION_SHARD_MISSING" || shardOf(err) != "c1" {
		t.Fatalf("TryAcquire on the shard the session lacks = %v (reason %q, shard %q); want failed_precondition, SESSION_SHARD_MISSING, shard c1", err, reasonOf(err), shardOf(err))
	}
	// Extending to a shard that is still down fails retryably and leaves
	// the session as it was.
	_, err = g.Client.ExtendSession(ctx, connect.NewRequest(&v1.ExtendSessionRequest{SessionId: s2.Msg.SessionId, Shards: []string{"c1"}, TtlMs: 10000}))
	if codeOf(err) != connect.CodeUnavailable {
		t.Fatalf("ExtendSession to the stopped shard = %v; want unavailable", err)
	}

	f.etcds[1].Restart()
	awaitShard(t, g, s1.Msg.SessionId, "c1") // the breaker lets c1 through again

	// s1's lease on c1 lapses (revoked here, as etcd expires it).
	revokeSessions(t, f.etcds[1].ClientFor(t), f.prefix)
	ka, err := g.Client.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: s1.Msg.SessionId}))
	if err != nil {
		t.Fatalf("KeepAliveSession with c1's lease gone = %v; want c0 renewed", err)
	}
	wantStates(t, "KeepAliveSession with c1's lease gone", ka.Msg.Shards, map[string]v1.ShardLeaseState{"c0": live, "c1": lost})
	// Only c1's lock is lost.
	if _, err := g.Client.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: onC1.LockId, FencingToken: onC1.FencingToken})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("Renew of the lock on the lapsed lease = %v; want failed_precondition", err)
	}
	if _, err := g.Client.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: onC0.LockId, FencingToken: onC0.FencingToken})); err != nil {
		t.Fatalf("Renew of the c0 lock after c1's lease lapsed = %v", err)
	}
	// The lapsed lease is not revived: an acquire there says which lease
	// is gone, and a keepalive of that shard alone says the session is lost
	// there.
	_, err = g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: names["c1"][2], SessionId: s1.Msg.SessionId}))
	if codeOf(err) != connect.CodeFailedPrecondition || reasonOf(err) != "SESSION_LOST" || shardOf(err) != "c1" {
		t.Fatalf("TryAcquire on the lapsed lease = %v (reason %q, shard %q); want SESSION_LOST on c1", err, reasonOf(err), shardOf(err))
	}
	_, err = g.Client.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: s1.Msg.SessionId, Shards: []string{"c1"}}))
	if reasonOf(err) != "SESSION_LOST" {
		t.Fatalf("KeepAliveSession of c1 alone = %v; want SESSION_LOST", err)
	}
	_, err = g.Client.ExtendSession(ctx, connect.NewRequest(&v1.ExtendSessionRequest{SessionId: s1.Msg.SessionId, Shards: []string{"c1"}, TtlMs: 10000}))
	if reasonOf(err) != "SESSION_LOST" {
		t.Fatalf("ExtendSession keeping the lapsed lease = %v; want SESSION_LOST", err)
	}

	// Extended, s2 covers c1 too.
	ext, err := g.Client.ExtendSession(ctx, connect.NewRequest(&v1.ExtendSessionRequest{SessionId: s2.Msg.SessionId, Shards: []string{"c1"}, TtlMs: 10000, ClientId: "sess"}))
	if err != nil {
		t.Fatalf("ExtendSession to c1 once it is back = %v", err)
	}
	wantStates(t, "ExtendSession to c1", ext.Msg.Shards, map[string]v1.ShardLeaseState{"c1": live})
	sessionTry(t, g, ext.Msg.SessionId, names["c1"][1])
	ka, err = g.Client.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: ext.Msg.SessionId}))
	if err != nil {
		t.Fatal(err)
	}
	wantStates(t, "KeepAliveSession of the extended session", ka.Msg.Shards, map[string]v1.ShardLeaseState{"c0": live, "c1": live})
	if ka.Msg.ValidForMs <= 0 || ka.Msg.TtlMs != 10000 || ka.Msg.ExpiresAt == nil {
		t.Fatalf("KeepAliveSession top-level valid_for_ms %d, ttl_ms %d, expires_at %v with every lease renewed; want set", ka.Msg.ValidForMs, ka.Msg.TtlMs, ka.Msg.ExpiresAt)
	}

	// s1 replaces its lapsed lease: a new lease, and the old lock stays lost.
	rep, err := g.Client.ExtendSession(ctx, connect.NewRequest(&v1.ExtendSessionRequest{SessionId: s1.Msg.SessionId, Shards: []string{"c1"}, TtlMs: 10000, Replace: true}))
	if err != nil {
		t.Fatalf("ExtendSession replacing the lapsed lease = %v", err)
	}
	wantStates(t, "ExtendSession replacing c1", rep.Msg.Shards, map[string]v1.ShardLeaseState{"c1": live})
	sessionTry(t, g, rep.Msg.SessionId, names["c1"][2])
	if _, err := g.Client.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: onC1.LockId, FencingToken: onC1.FencingToken})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("Renew of the lock on the replaced lease = %v; want still lost", err)
	}
	d, err := g.Client.Describe(ctx, connect.NewRequest(&v1.DescribeRequest{Name: names["c1"][0]}))
	if err != nil || d.Msg.Held {
		t.Fatalf("Describe of the lost c1 lock = %v, %v; want free", d, err)
	}
}

// awaitShard waits until a keepalive of session id renews shard.
func awaitShard(t *testing.T, g *gw, id, shard string) {
	t.Helper()
	ctx := ctxT(t)
	for {
		ka, err := g.Client.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: id}))
		if err == nil && states(ka.Msg.Shards)[shard] == live {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("shard %s not renewed: %v %v", shard, ka, err)
		}
		time.Sleep(50 * time.Millisecond) // waiting out the breaker's open interval
	}
}

// revokeSessions revokes every session lease under prefix on one cluster,
// as etcd does when they lapse.
func revokeSessions(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	resp, err := cli.Get(ctxT(t), prefix+"/sessions/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatal("no session lease to revoke")
	}
	for _, kv := range resp.Kvs {
		if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(kv.Lease)); err != nil {
			t.Fatal(err)
		}
	}
}

// Every lease of a session gone: the keepalive fails as a whole with
// SESSION_LOST.
func TestKeepAliveSessionAllLeasesGone(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2)
	g := f.gateway(t, nil, 0, 1)
	ctx := ctxT(t)
	s, err := g.Client.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{TtlMs: 10000}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		revokeSessions(t, f.etcds[i].ClientFor(t), f.prefix)
	}
	_, err = g.Client.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: s.Msg.SessionId}))
	if codeOf(err) != connect.CodeFailedPrecondition || reasonOf(err) != "SESSION_LOST" {
		t.Fatalf("KeepAliveSession with every lease gone = %v; want failed_precondition, SESSION_LOST", err)
	}
	_, err = g.Client.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: s.Msg.SessionId, Shards: []string{"c0", "c0"}}))
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("KeepAliveSession naming a shard twice = %v; want invalid_argument", err)
	}
}
