package modules

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fenceModule is the fencing library's module path.
const fenceModule = rootModule + "/fence"

// fenceForbidden are the modules a program importing only the fencing
// library must never resolve: the server's and its tools' (serverModules),
// and of etcd and OpenTelemetry whatever is not the etcd client that
// EtcdGuard speaks through. (As for the SDK, go mod tidy records the test
// dependencies of every module the program requires: zap's tests bring
// go.uber.org/goleak, which nothing builds into the program.)
var fenceForbidden = append([]string{
	"go.etcd.io/etcd/server/",             // etcd's server
	"go.etcd.io/etcd/pkg/",                // the server's utilities (not client/pkg)
	"go.etcd.io/raft/",                    // its consensus
	"go.etcd.io/bbolt",                    // its storage
	"connectrpc.com/",                     // the gateway's RPC stack
	"go.opentelemetry.io/contrib/",        // the gateway's instrumentation
	"go.opentelemetry.io/otel/exporters/", // and its exporters
	"github.com/prometheus/",              // its metrics
	rootModule + "/client",                // the SDK
	rootModule + "/proto",                 // the generated API
}, serverModules...)

// fenceTestOnly are modules a program importing only the fencing library
// must not link, but whose sums go mod tidy records because a test of one
// of the etcd client's dependencies imports them: gRPC's balancer tests
// import the OpenTelemetry SDK. They may appear in the program's go.sum only
// by that route, never through fence or the program itself.
var fenceTestOnly = []string{
	"go.opentelemetry.io/otel/sdk", // and, by prefix, otel/sdk/metric
}

// TestFenceConsumerGoSum proves the fencing library's dependency claim: a
// program that imports only fence resolves, with `go mod tidy`, a go.sum
// free of etcd's server, Connect, SQL drivers, the browser tests, Kubernetes,
// the load-test tooling and leasegate's other modules, and nothing that
// fence/go.sum does not already list; and it links nothing but fence, the
// etcd client and the client's dependencies.
func TestFenceConsumerGoSum(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	tidyConsumer(t, dir, map[string]string{
		"go.mod": `module example.com/fenceconsumer

go 1.26.0

require ` + fenceModule + ` v0.0.0-00010101000000-000000000000

replace ` + fenceModule + ` => ` + filepath.Join(root, "fence") + `
`,
		"main.go": `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/leasegate/leasegate/fence"
)

func main() {
	if err := fence.NewMemory().Accept(context.Background(), "order:42", 11); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = fence.NewEtcdGuard(nil, "")
	_, _ = fence.NewSQLGuard(context.Background(), nil, fence.SQLConfig{})
	_ = fence.Middleware(fence.NewMemory(), nil)
}
`,
	})

	sum := sumModules(t, filepath.Join(dir, "go.sum"))
	t.Logf("a program importing only fence has a go.sum of %d lines, %d modules", sum.lines, len(sum.modules))
	own := sumModules(t, filepath.Join(root, "fence", "go.sum"))
	for _, m := range sum.modules {
		for _, bad := range fenceForbidden {
			if matches(m, bad) {
				t.Errorf("the consumer's go.sum lists %s: a program importing only fence must not resolve %s", m, bad)
			}
		}
		if !slices.Contains(own.modules, m) {
			t.Errorf("the consumer's go.sum lists %s, which fence/go.sum does not", m)
		}
		for _, only := range fenceTestOnly {
			if strings.HasPrefix(m, only) {
				checkTestOnly(t, dir, m)
			}
		}
	}

	// What the program links: every package it builds, by module.
	out, err := goCmd(dir, []string{"GOFLAGS=-mod=mod", "GOPROXY=off"}, "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps in the consumer: %v", err)
	}
	linked := slices.Compact(slices.Sorted(slices.Values(strings.Fields(string(out)))))
	t.Logf("a program importing only fence links %d modules: %s", len(linked), strings.Join(linked, " "))
	for _, m := range linked {
		for _, bad := range fenceForbidden {
			if matches(m, bad) {
				t.Errorf("the consumer links %s: a program importing only fence must not build %s", m, bad)
			}
		}
		for _, only := range fenceTestOnly {
			if strings.HasPrefix(m, only) {
				t.Errorf("the consumer links %s: a program importing only fence must not build %s", m, only)
			}
		}
	}
}

// checkTestOnly fails unless module m is in the consumer's module graph in
// dir only because a test of a package outside leasegate imports it, as
// `go mod why -m` reports the shortest such chain.
func checkTestOnly(t *testing.T, dir, m string) {
	t.Helper()
	out, err := goCmd(dir, []string{"GOFLAGS=-mod=mod", "GOPROXY=off"}, "mod", "why", "-m", m).CombinedOutput()
	if err != nil {
		t.Fatalf("go mod why -m %s: %v\n%s", m, err, out)
	}
	for line := range strings.Lines(string(out)) {
		pkg, isTest := strings.CutSuffix(strings.TrimSpace(line), ".test")
		if isTest && !strings.HasPrefix(pkg, "example.com/") && pkg != rootModule && !strings.HasPrefix(pkg, rootModule+"/") {
			return
		}
	}
	t.Errorf("the consumer's go.sum lists %s other than for a test of a dependency: a program importing only fence must not need it\n%s", m, out)
}

// TestFenceRequirements checks that the fencing library's go.mod requires
// directly exactly the modules whose packages fence's own packages import,
// and that its tests import only the standard library and the module's own
// packages: what needs a database driver, an etcd server or a gateway is
// tested in internal/fencetest, in the root module.
func TestFenceRequirements(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "fence")
	if got := modulePath(t, filepath.Join(dir, "go.mod")); got != fenceModule {
		t.Fatalf("fence/go.mod is module %q; want %q", got, fenceModule)
	}

	out, err := goCmd(dir, nil, "mod", "edit", "-json").Output()
	if err != nil {
		t.Fatalf("go mod edit -json in fence: %v", err)
	}
	var mod struct {
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	var direct []string
	for _, r := range mod.Require {
		if !r.Indirect {
			direct = append(direct, r.Path)
		}
	}
	slices.Sort(direct)

	// The modules of what the module's packages import, and of what their
	// tests import.
	imported := importedModules(t, dir, "{{join .Imports \"\\n\"}}")
	tested := importedModules(t, dir, "{{join .TestImports \"\\n\"}}\n{{join .XTestImports \"\\n\"}}")
	if !slices.Equal(direct, imported) {
		t.Errorf("fence/go.mod requires %v directly; fence's packages import from %v: its go.mod must list only what fence imports", direct, imported)
	}
	for _, m := range tested {
		if !slices.Contains(imported, m) {
			t.Errorf("fence's tests import from %s, which fence itself does not: such tests belong in internal/fencetest", m)
		}
	}
}

// importedModules lists, sorted, the modules other than the standard
// library and the module in dir itself that provide the packages format
// (a go list template over ./...) names.
func importedModules(t *testing.T, dir, format string) []string {
	t.Helper()
	out, err := goCmd(dir, nil, "list", "-f", format, "./...").Output()
	if err != nil {
		t.Fatalf("go list -f %q ./... in %s: %v", format, dir, err)
	}
	pkgs := slices.Compact(slices.Sorted(slices.Values(strings.Fields(string(out)))))
	if len(pkgs) == 0 {
		return nil
	}
	args := append([]string{"list", "-f", "{{if not .Standard}}{{.Module.Path}}{{end}}"}, pkgs...)
	out, err = goCmd(dir, nil, args...).Output()
	if err != nil {
		t.Fatalf("go list of fence's imports %v: %v", pkgs, err)
	}
	var mods []string
	for _, m := range strings.Fields(string(out)) {
		if m != fenceModule && !slices.Contains(mods, m) {
			mods = append(mods, m)
		}
	}
	slices.Sort(mods)
	return mods
}
