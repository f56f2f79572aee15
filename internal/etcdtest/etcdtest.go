// Package etcdtest starts real, embedded etcd members for tests. Lock
// semantics in leasegate are never tested against a mock.
package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasegate/leasegate/internal/embedetcd"
)

// Cluster is a single-member etcd cluster running inside the test process.
type Cluster struct {
	t        testing.TB
	dir      string
	cfg      embedetcd.Config
	srv      *embedetcd.Server
	endpoint string
}

// Start launches a member with fsync disabled and registers its shutdown
// with t.Cleanup.
func Start(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{t: t, dir: t.TempDir()}
	addr, err := embedetcd.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := embedetcd.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	c.cfg = embedetcd.Config{Name: "test", Dir: c.dir, ClientAddr: addr, PeerAddr: peer, UnsafeNoFsync: true}
	c.start()
	t.Cleanup(c.Stop)
	return c
}

func (c *Cluster) start() {
	c.t.Helper()
	srv, err := embedetcd.Start(c.cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.srv = srv
	c.endpoint = srv.Endpoint()
}

// Endpoint is the member's client URL; it stays the same across Restart.
func (c *Cluster) Endpoint() string { return c.endpoint }

// Server is the running member, or nil while stopped.
func (c *Cluster) Server() *embedetcd.Server { return c.srv }

// Stop shuts the member down. Calling it twice is harmless.
func (c *Cluster) Stop() {
	if c.srv != nil {
		c.srv.Close()
		c.srv = nil
	}
}

// Restart starts a stopped member again on the same ports and data.
func (c *Cluster) Restart() {
	c.t.Helper()
	c.Stop()
	c.start()
}

// Client returns a new client for the member, closed at test cleanup.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{c.endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

// Compact compacts the member's history up to its current revision.
func (c *Cluster) Compact(ctx context.Context, cli *clientv3.Client) int64 {
	c.t.Helper()
	resp, err := cli.Get(ctx, "leasegate-compact-probe")
	if err != nil {
		c.t.Fatal(err)
	}
	rev := resp.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		c.t.Fatal(err)
	}
	return rev
}
