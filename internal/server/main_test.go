package server_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
)

var shared *etcdtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(c *etcdtest.Cluster) { shared = c }))
}

var prefixSeq atomic.Int64

// startGateway starts a gateway over the shared etcd with the given
// telemetry, under a fresh prefix, and stops it at cleanup.
func startGateway(tb testing.TB, p *telemetry.Providers, edit func(*server.Config)) *server.Server {
	tb.Helper()
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Prefix = fmt.Sprintf("/srvtest/%d", prefixSeq.Add(1))
	cfg.Clusters = []server.Cluster{{Name: "main", Endpoints: []string{shared.Endpoint()}}}
	cfg.Telemetry = p
	if edit != nil {
		edit(&cfg)
	}
	srv, err := server.Start(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}
