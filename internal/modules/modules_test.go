package modules

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rootModule is the module path of the repository's root go.mod.
const rootModule = "github.com/leasegate/leasegate"

// repoRoot returns the repository's root directory, where the root go.mod is.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if got := modulePath(t, filepath.Join(root, "go.mod")); got != rootModule {
		t.Fatalf("%s/go.mod is module %q; want %q", root, got, rootModule)
	}
	return root
}

// modulePath reads the module directive of the go.mod file at path.
func modulePath(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	t.Fatalf("%s has no module directive", path)
	return ""
}

// nestedModules returns the directories below root that hold a go.mod,
// skipping testdata and hidden directories as the go command does.
func nestedModules(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "go.mod" && filepath.Dir(path) != root {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// goCmd prepares `go args…` in dir, outside any workspace file.
func goCmd(dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	return cmd
}

// statTree stats every file under root. go test caches a passing result
// keyed on the files the test itself touched; the go commands this test
// runs read the nested modules and, for the SDK's examples, the server's
// sources, so every file of the repository is an input.
func statTree(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNestedModules vets and tests every nested module: the root module's
// `go test ./...` does not descend into them, so this test does.
func TestNestedModules(t *testing.T) {
	root := repoRoot(t)
	statTree(t, root)
	mods := nestedModules(t, root)
	for _, want := range []string{"client", "fence", "proto"} {
		if !slices.Contains(mods, filepath.Join(root, want)) {
			t.Errorf("no module in %s/; want %s/%s/go.mod", want, root, want)
		}
	}
	for _, dir := range mods {
		rel, _ := filepath.Rel(root, dir)
		t.Run(rel, func(t *testing.T) {
			if got, want := modulePath(t, filepath.Join(dir, "go.mod")), rootModule+"/"+filepath.ToSlash(rel); got != want {
				t.Errorf("%s/go.mod is module %q; want %q, so that import paths match directories", rel, got, want)
			}
			vet := []string{"vet", "./..."}
			// -count=1: this test's own result is cached on every file of
			// the repository (statTree); the inner go command's cache would
			// miss the server's sources, which the SDK's examples build.
			test := []string{"test", "-count=1", "./..."}
			if testing.Short() {
				test = append(test, "-short")
			}
			for _, args := range [][]string{vet, test} {
				out, err := goCmd(dir, nil, args...).CombinedOutput()
				if err != nil {
					t.Errorf("go %s in %s: %v\n%s", strings.Join(args, " "), rel, err, out)
					continue
				}
				t.Logf("go %s in %s:\n%s", strings.Join(args, " "), rel, out)
			}
		})
	}
}

// serverModules are modules of the server, its tests and its tools that
// neither a program importing only the SDK nor one importing only the
// fencing library may resolve.
var serverModules = []string{
	"k8s.io/",                     // Kubernetes types
	"sigs.k8s.io/",                // Kubernetes YAML
	"github.com/jackc/",           // pgx
	"modernc.org/",                // SQLite
	"github.com/mattn/go-sqlite3", // cgo SQLite
	"github.com/lib/pq",           // PostgreSQL
	"github.com/go-sql-driver/",   // MySQL
	"github.com/redis/",           // go-redis
	"github.com/go-redsync/",      // redsync
	"github.com/anishathalye/",    // porcupine
	"github.com/compose-spec/",    // compose-go
	"github.com/envoyproxy/",      // Envoy's control plane
	"github.com/prometheus-operator/",
	"github.com/spf13/",        // cobra and pflag
	"github.com/HdrHistogram/", // the load generator's histograms
	"github.com/chromedp/",     // the web console's browser tests
	rootModule,                 // the server's module itself
}

// toolModules are the modules a program importing only the SDK must never
// resolve: the server's, and etcd's altogether. (go mod tidy records the
// test dependencies of every module a program requires, so the SDK's own
// leak checker, go.uber.org/goleak, is listed there, as otelconnect's
// testify is; neither is built into the program.)
var toolModules = append([]string{
	"go.etcd.io/",     // etcd's server, client and raft
	"go.uber.org/zap", // etcd's logger
}, serverModules...)

// TestSDKConsumerGoSum proves the SDK's dependency claim: a program that
// imports only the SDK resolves, with `go mod tidy`, a go.sum free of the
// server's and the tests' dependencies, and nothing the SDK's and the
// generated API's own modules do not already list. The program's go.mod is
// the one README.md tells SDK users to write, so the test also proves that
// it builds against a checkout with nothing published.
func TestSDKConsumerGoSum(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": readmeConsumer(t, root),
		"main.go": `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/leasegate/leasegate/client"
)

func main() {
	c, err := client.New([]string{"http://127.0.0.1:7070"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	_, _ = c.TryAcquire(context.Background(), "consumer")
}
`,
	}
	tidyConsumer(t, dir, files)

	sum := sumModules(t, filepath.Join(dir, "go.sum"))
	t.Logf("a program importing only the SDK has a go.sum of %d lines, %d modules", sum.lines, len(sum.modules))
	sdk := sumModules(t, filepath.Join(root, "client", "go.sum"))
	api := sumModules(t, filepath.Join(root, "proto", "go.sum"))
	for _, m := range sum.modules {
		for _, bad := range toolModules {
			if matches(m, bad) {
				t.Errorf("the consumer's go.sum lists %s: a program importing only the SDK must not resolve %s", m, bad)
			}
		}
		if !slices.Contains(sdk.modules, m) && !slices.Contains(api.modules, m) {
			t.Errorf("the consumer's go.sum lists %s, which neither client/go.sum nor proto/go.sum does", m)
		}
	}
}

// tidyConsumer writes files (a go.mod and a program) into dir, resolves the
// program's requirements with go mod tidy and builds it.
func tidyConsumer(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Offline first, from the module cache the root module's build filled.
	// tidy also wants the modules that the tests of the program's
	// dependencies import (for `go test all`); the cache may lack those versions, and
	// then the configured proxy supplies them.
	offline := []string{"GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off"}
	out, err := goCmd(dir, offline, "mod", "tidy").CombinedOutput()
	if err != nil {
		t.Logf("go mod tidy offline: %v\n%s\nretrying with the configured proxy", err, out)
		if out, err = goCmd(dir, []string{"GOFLAGS=-mod=mod", "GOSUMDB=off"}, "mod", "tidy").CombinedOutput(); err != nil {
			t.Fatalf("go mod tidy: %v\n%s", err, out)
		}
	}
	if out, err := goCmd(dir, []string{"GOFLAGS=-mod=mod", "GOPROXY=off"}, "build", "-o", os.DevNull, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build of the consumer: %v\n%s", err, out)
	}
}

// matches reports whether module m is named by entry: the module itself,
// or, for an entry ending in "/", every module under it.
func matches(m, entry string) bool {
	return m == entry || strings.HasSuffix(entry, "/") && strings.HasPrefix(m, entry)
}

// goSum is what a go.sum file holds: its line count and the modules it
// names, sorted.
type goSum struct {
	lines   int
	modules []string
}

func sumModules(t *testing.T, path string) goSum {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s goSum
	for line := range strings.Lines(string(b)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		s.lines++
		if !slices.Contains(s.modules, fields[0]) {
			s.modules = append(s.modules, fields[0])
		}
	}
	slices.Sort(s.modules)
	return s
}
