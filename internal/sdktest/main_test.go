package sdktest_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
)

var shared *etcdtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(c *etcdtest.Cluster) { shared = c }))
}

// gateway is a leasegate gateway running in-process over the shared etcd.
type gateway = gwtest.Gateway

// startGateway starts a gateway under prefix (a fresh one when empty) and
// stops it at cleanup.
func startGateway(tb testing.TB, prefix string) *gateway {
	tb.Helper()
	return gwtest.Start(tb, shared, gwtest.Prefix(prefix))
}

// launchGateway starts a gateway outside a test; the caller stops it.
func launchGateway(prefix string) (*gateway, error) {
	return gwtest.Launch(shared, gwtest.Prefix(prefix))
}

// newClient returns a client for endpoints, closed at cleanup.
func newClient(tb testing.TB, endpoints []string, opts ...client.Option) *client.Client {
	tb.Helper()
	c, err := client.New(endpoints, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// fakeClock adapts the repository's manual clock to client.Clock.
type fakeClock struct{ *clock.Fake }

func (f fakeClock) NewTimer(d time.Duration) client.Timer { return f.Fake.NewTimer(d) }

func newFakeClock() fakeClock {
	return fakeClock{clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
}

// await fails the test unless ch delivers within a generous bound: the
// bound only turns a hang into a failure, it synchronises nothing.
func await[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		tb.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// notDone fails the test if ch is already closed.
func notDone(tb testing.TB, ch <-chan struct{}, what string) {
	tb.Helper()
	select {
	case <-ch:
		tb.Fatalf("%s is closed; want open", what)
	default:
	}
}

// leasesUnder returns the leases of every key under <prefix>/<sub>/.
func leasesUnder(tb testing.TB, prefix, sub string) []clientv3.LeaseID {
	tb.Helper()
	cli := shared.ClientFor(tb)
	resp, err := cli.Get(ctxT(tb), prefix+"/"+sub+"/", clientv3.WithPrefix())
	if err != nil {
		tb.Fatal(err)
	}
	var out []clientv3.LeaseID
	for _, kv := range resp.Kvs {
		if kv.Lease != 0 {
			out = append(out, clientv3.LeaseID(kv.Lease))
		}
	}
	return out
}

// revokeLocks revokes the lease of every lock key whose name contains name,
// as if etcd had expired them, and returns how many it revoked.
func revokeLocks(tb testing.TB, prefix, name string) int {
	tb.Helper()
	cli := shared.ClientFor(tb)
	resp, err := cli.Get(ctxT(tb), prefix+"/locks/", clientv3.WithPrefix())
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if !strings.Contains(string(kv.Key), name) || kv.Lease == 0 {
			continue
		}
		if _, err := cli.Revoke(ctxT(tb), clientv3.LeaseID(kv.Lease)); err != nil {
			tb.Fatal(err)
		}
		n++
	}
	return n
}

// slowTransport advances a fake clock while a request is in flight, so
// tests can tell a request's send time from its answer's arrival.
type slowTransport struct {
	base  http.RoundTripper
	clk   fakeClock
	delay atomic.Int64 // nanoseconds to advance per request
}

func (s *slowTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if d := time.Duration(s.delay.Load()); d > 0 {
		s.clk.Advance(d)
	}
	return s.base.RoundTrip(r)
}

func h2cTransport() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &p}
}

// refuseCalls fails every call whose path ends in one of the given
// method names before it leaves the client, while on is set: to the
// caller, no gateway answered.
type refuseCalls struct {
	base    http.RoundTripper
	methods []string
	on      atomic.Bool
}

func (r *refuseCalls) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.on.Load() {
		for _, m := range r.methods {
			if strings.HasSuffix(req.URL.Path, "/"+m) {
				return nil, errors.New("refused by the test: no gateway reached")
			}
		}
	}
	return r.base.RoundTrip(req)
}

// refusingClient is a client of g whose calls of methods fail before
// they leave it while tr.on is set, with a short request timeout and
// quick retries, so an unanswered call ends fast.
func refusingClient(tb testing.TB, g *gateway, methods ...string) (*client.Client, *refuseCalls) {
	tb.Helper()
	tr := &refuseCalls{base: h2cTransport(), methods: methods}
	c := newClient(tb, []string{g.URL}, client.WithHTTPClient(&http.Client{Transport: tr}),
		client.WithRequestTimeout(2*time.Second), client.WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	return c, tr
}
