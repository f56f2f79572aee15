package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The SDK must not depend on the server: a user's binary gets the
// generated API, connect and public libraries, nothing of the gateway, the
// lock engine, the shard router, the server's internal packages or etcd.
// The SDK's own module (client/go.mod) cannot require the server's, and
// this test says why; cmd/leasectl has the same fence in the root module.
func TestDependencyFence(t *testing.T) {
	t.Parallel()
	const module = "github.com/leasegate/leasegate/"
	allowed := []string{module + "client", module + "proto/"}
	forbidden := []string{module, "go.etcd.io/"}

	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	importers := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		for _, imp := range strings.Fields(imports) {
			importers[imp] = append(importers[imp], pkg)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, _, _ := strings.Cut(line, ":")
		if bad(pkg, forbidden, allowed) {
			t.Errorf("%s is imported by %s; client/ may import only the generated API, connect and public libraries",
				pkg, strings.Join(importers[pkg], ", "))
		}
	}
}

func bad(pkg string, forbidden, allowed []string) bool {
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
