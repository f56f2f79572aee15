package main

import (
	"testing"

	"github.com/leasegate/leasegate/internal/depfence"
)

// TestServerDependencyFence keeps the server binary lean: it links what it
// runs (the gateway, embedded etcd, telemetry) and nothing of the demos,
// the fencing library, the load and chaos tools, or their dependencies.
// Those live in their own commands (examples/, loadtest/).
func TestServerDependencyFence(t *testing.T) {
	const module = "github.com/leasegate/leasegate/"
	forbidden := []string{
		module + "fence",    // resource-side fencing: the resource's code, not the server's
		module + "examples", // demos
		module + "loadtest", // load generator, chaos harness and its etcdmember
		module + "client",   // the SDK: the server speaks the wire API itself
		module + "internal/etcdtest",
		"modernc.org/",                      // pure-Go SQLite and its libc
		"github.com/mattn/go-sqlite3",       // SQLite drivers
		"github.com/jackc/",                 // pgx
		"github.com/lib/pq",                 // PostgreSQL driver
		"github.com/anishathalye/porcupine", // linearizability checker
		"github.com/redis/",                 // Redis baseline of the load tests
		"github.com/go-redsync/",
		"github.com/HdrHistogram/",
		"k8s.io/api/",
		"k8s.io/apimachinery/",
		"k8s.io/client-go/",
		"github.com/compose-spec/",
		"github.com/envoyproxy/",
		"github.com/prometheus-operator/",
		"go.uber.org/goleak",
		"github.com/chromedp/", // the web console's browser tests drive Chromium with it
		"testing",
	}

	g := depfence.Deps(t, ".")
	for _, pkg := range g.Packages {
		for _, f := range forbidden {
			if depfence.Under(pkg, f) {
				t.Errorf("cmd/leasegate links %s (imported by %s); the server binary must not carry %s", pkg, g.ImportedBy(pkg), f)
				break
			}
		}
	}
}
