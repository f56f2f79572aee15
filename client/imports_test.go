package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The SDK and leasectl must not depend on the server: a user's binary gets
// the generated API, connect and public libraries, nothing of the gateway,
// the lock engine, the shard router, internal packages or etcd.
func TestDependencyFence(t *testing.T) {
	t.Parallel()
	const module = "github.com/leasegate/leasegate/"
	allowed := []string{module + "client", module + "proto/", module + "cmd/leasectl"}
	forbidden := []string{module, "go.etcd.io/"}

	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}", ".", "../cmd/leasectl").CombinedOutput()
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
			t.Errorf("%s is imported by %s; client/ and cmd/leasectl may import only the generated API, connect and public libraries",
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
