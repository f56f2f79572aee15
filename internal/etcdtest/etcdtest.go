// Package etcdtest starts real, embedded etcd members for tests. Lock
// semantics in leasegate are never tested against a mock.
package etcdtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/leasegate/leasegate/internal/embedetcd"
)

// Cluster is a single-member etcd cluster running inside the test process.
type Cluster struct {
	t        testing.TB // nil when started with StartIn
	dir      string
	cfg      embedetcd.Config
	srv      *embedetcd.Server
	endpoint string
	// tls and user, password are what Client presents (StartTLS, EnableAuth).
	tls            *tls.Config
	user, password string
}

// Start launches a member with fsync disabled and registers its shutdown
// with t.Cleanup.
func Start(t testing.TB) *Cluster {
	t.Helper()
	c, err := StartIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c.t = t
	t.Cleanup(c.Stop)
	return c
}

// StartIn launches a member with its data under dir, for use from TestMain
// where no testing.TB exists. The caller must Stop it.
func StartIn(dir string) (*Cluster, error) {
	c := &Cluster{dir: dir}
	addr, err := embedetcd.FreeAddr()
	if err != nil {
		return nil, err
	}
	peer, err := embedetcd.FreeAddr()
	if err != nil {
		return nil, err
	}
	c.cfg = embedetcd.Config{Name: "test", Dir: dir, ClientAddr: addr, PeerAddr: peer, UnsafeNoFsync: true}
	if err := c.start(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start() error {
	srv, err := embedetcd.Start(c.cfg)
	if err != nil {
		return err
	}
	c.srv = srv
	c.endpoint = srv.Endpoint()
	return nil
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

// Restart starts a stopped member again on the same ports and data. It
// needs a cluster made by Start.
func (c *Cluster) Restart() {
	c.t.Helper()
	c.Stop()
	if err := c.start(); err != nil {
		c.t.Fatal(err)
	}
}

// Client returns a new client for the member, closed at the cleanup of the
// test that started it. It needs a cluster made by Start.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	return c.ClientFor(c.t)
}

// ClientFor returns a new client for the member, closed at t's cleanup.
func (c *Cluster) ClientFor(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := c.newClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// NewClient dials endpoint with a quiet logger.
func NewClient(endpoints ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// Compact writes one key and compacts the history up to that revision, so a
// watch from any earlier revision fails with ErrCompacted.
func Compact(ctx context.Context, cli *clientv3.Client) (int64, error) {
	// Two writes, so that even a watch from the revision right after the
	// caller's last read starts below the compacted revision.
	if _, err := cli.Put(ctx, "/leasegate-test/compact-probe", "x"); err != nil {
		return 0, err
	}
	resp, err := cli.Put(ctx, "/leasegate-test/compact-probe", "y")
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, err
	}
	return rev, nil
}

// LeakOptions are the goleak options for packages that run an embedded etcd:
// they ignore goroutines that etcd's own libraries leave running for the
// life of the process.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreTopFunction("gopkg.in/natefinch/lumberjack%2ev2.(*Logger).millRun"),
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run"),
	}
}

// Main runs a package's tests around one shared embedded member: it starts
// the member, hands it to use, runs the tests, runs done, stops the member
// and, when the tests passed, fails on leaked goroutines. It returns the
// exit code for os.Exit.
func Main(m *testing.M, use func(*Cluster), done ...func()) int {
	dir, err := os.MkdirTemp("", "leasegate-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	c, err := StartIn(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	use(c)
	code := m.Run()
	for _, f := range done {
		f()
	}
	c.Stop()
	if code == 0 {
		if err := goleak.Find(LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}
