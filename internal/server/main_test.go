package server_test

import (
	"os"
	"testing"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
)

var shared *etcdtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(c *etcdtest.Cluster) { shared = c }))
}

// startGateway starts a gateway over the shared etcd with the given
// telemetry, under a fresh prefix, and stops it at cleanup.
func startGateway(tb testing.TB, p *telemetry.Providers, edit func(*server.Config)) *server.Server {
	tb.Helper()
	return gwtest.Start(tb, shared, gwtest.Configure(func(c *server.Config) { c.Telemetry = p }), gwtest.Configure(edit)).Server
}
