package conformance_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// repoRoot is the repository's root, found from this file.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestConformancePython runs the Python SDK's tests, which include its
// conformance runner, against a harness of their own. It skips until
// sdk/python exists.
func TestConformancePython(t *testing.T) {
	root := repoRoot()
	if _, err := os.Stat(filepath.Join(root, "sdk", "python", "pyproject.toml")); err != nil {
		t.Skip("no Python SDK yet (sdk/python/pyproject.toml is missing)")
	}
	runExternal(t, root, nil, "python3", "-m", "unittest", "discover", "-s", "sdk/python/tests")
}

// TestConformanceTypeScript runs the TypeScript SDK's tests, which include
// its conformance runner, against a harness of their own. It skips until
// sdk/typescript exists, and while its dependencies are not installed
// unless CI is set, where that is a failure.
func TestConformanceTypeScript(t *testing.T) {
	root := repoRoot()
	dir := filepath.Join(root, "sdk", "typescript")
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		t.Skip("no TypeScript SDK yet (sdk/typescript/package.json is missing)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("sdk/typescript/node_modules is missing: run `npm ci` in sdk/typescript before the tests")
		}
		t.Skip("sdk/typescript/node_modules is missing: run `npm ci` in sdk/typescript to run the TypeScript conformance tests")
	}
	// The SDK's own live tests start gateways of this checkout's binary.
	bin := filepath.Join(t.TempDir(), "leasegate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/leasegate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/leasegate: %v\n%s", err, out)
	}
	runExternal(t, dir, []string{"LEASEGATE_BIN=" + bin}, "npm", "test")
}

// runExternal starts a harness and runs name with args in dir, with env
// and the harness's description in LEASEGATE_CONFORMANCE and the
// scenarios' path in LEASEGATE_CONFORMANCE_SCENARIOS; the test fails with
// the command's output if it fails.
func runExternal(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is not on PATH: %v", name, err)
	}
	h := startHarness(t)
	desc, err := json.Marshal(h.Description())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"LEASEGATE_CONFORMANCE="+string(desc),
		"LEASEGATE_CONFORMANCE_SCENARIOS="+scenariosPath(),
	)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	t.Logf("%s", out)
}
