package main

import (
	"strings"
	"testing"

	"github.com/leasegate/leasegate/internal/depfence"
)

// TestDependencyFence keeps leasectl a client: like the SDK it uses
// (client/imports_test.go), it may import only the SDK, the generated API,
// connect and public libraries, nothing of the gateway, the lock engine,
// the shard router, the server's internal packages or etcd.
func TestDependencyFence(t *testing.T) {
	const module = "github.com/leasegate/leasegate/"
	// internal/buildinfo is the standard library's runtime/debug and
	// nothing more: --version reads the build the same way the gateway does.
	allowed := []string{module + "client", module + "proto/", module + "cmd/leasectl", module + "internal/buildinfo"}
	forbidden := []string{module, "go.etcd.io/"}

	g := depfence.Deps(t, ".")
	for _, pkg := range g.Packages {
		if fenced(pkg, forbidden, allowed) {
			t.Errorf("%s is imported by %s; cmd/leasectl may import only the SDK, the generated API, connect and public libraries",
				pkg, g.ImportedBy(pkg))
		}
	}
}

// fenced reports whether pkg is under a forbidden prefix and no allowed one.
func fenced(pkg string, forbidden, allowed []string) bool {
	for _, a := range allowed {
		if strings.HasPrefix(pkg, a) {
			return false
		}
	}
	for _, f := range forbidden {
		if strings.HasPrefix(pkg, f) {
			return true
		}
	}
	return false
}
