package conformance_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/conformance"
)

// The quick starts of the READMEs are run as written: each test takes the
// first code block of the given language under the given heading, runs it
// against a harness gateway named by LEASEGATE_URL with the normal tenant's
// token in LEASEGATE_TOKEN (the variables the READMEs document), and checks
// that it exits 0, printed the fencing token it wrote under, and left the
// name it took free, having acquired and released it on the gateway.

// TestQuickStartGo runs README.md's "Go SDK" program.
func TestQuickStartGo(t *testing.T) {
	root := repoRoot()
	code := readmeBlock(t, filepath.Join(root, "README.md"), "## Go SDK", "go")
	// The program builds as a package of this module (an overlay, so the
	// source tree is left alone): it then resolves the SDK as the module's
	// own code does, with no network and no go.sum of its own.
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	virtual := filepath.Join(root, "internal", "conformance", "_quickstart", "main.go")
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {virtual: src}})
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "quickstart")
	build := exec.Command("go", "build", "-overlay", filepath.Join(dir, "overlay.json"), "-o", bin, "./internal/conformance/_quickstart")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go quick start does not build: %v\n%s\n%s", err, out, code)
	}
	runQuickStart(t, root, "process_order:42", nil, bin)
}

// TestQuickStartTypeScript runs sdk/typescript/README.md's first "Quick
// start" program as an ES module inside the package, so that it imports
// @leasegate/client as a user's program does.
func TestQuickStartTypeScript(t *testing.T) {
	root := repoRoot()
	dir := filepath.Join(root, "sdk", "typescript")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("sdk/typescript/node_modules is missing: run `npm ci` in sdk/typescript before the tests")
		}
		t.Skip("sdk/typescript/node_modules is missing: run `npm ci` in sdk/typescript to run the TypeScript quick start")
	}
	code := readmeBlock(t, filepath.Join(dir, "README.md"), "## Quick start", "ts")
	build := exec.Command("npm", "run", "build")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("npm run build: %v\n%s", err, out)
	}
	// Inside the package (dist/ is ignored by git), where the package's
	// name resolves to itself.
	src := filepath.Join(dir, "dist", fmt.Sprintf("quickstart-%d.mjs", os.Getpid()))
	if err := os.WriteFile(src, []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(src) })
	runQuickStart(t, dir, "orders/42", nil, "node", src)
}

// TestQuickStartPython runs sdk/python/README.md's first "Quick start"
// program with the SDK on PYTHONPATH.
func TestQuickStartPython(t *testing.T) {
	root := repoRoot()
	dir := filepath.Join(root, "sdk", "python")
	code := readmeBlock(t, filepath.Join(dir, "README.md"), "## Quick start", "python")
	src := filepath.Join(t.TempDir(), "quickstart.py")
	if err := os.WriteFile(src, []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	runQuickStart(t, dir, "orders/42", []string{"PYTHONPATH=" + dir}, "python3", src)
}

// readmeBlock returns the first fenced code block of lang after the line
// heading and before the next heading of its level.
func readmeBlock(t *testing.T, path, heading, lang string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	level := heading[:strings.IndexByte(heading, ' ')+1]
	var in, code bool
	var b strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in:
			in = line == heading
		case code && line == "```":
			return b.String()
		case code:
			b.WriteString(line + "\n")
		case line == "```"+lang:
			code = true
		case strings.HasPrefix(line, level):
			t.Fatalf("%s: no ```%s block under %q", path, lang, heading)
		}
	}
	t.Fatalf("%s: no ```%s block under %q", path, lang, heading)
	return ""
}

// tokenLine is what every quick start prints about its write.
var tokenLine = regexp.MustCompile(`fencing token (\d+)`)

// runQuickStart runs name with args in dir, with env added to the
// environment, against gateway 0 of a harness of its own, and checks what
// the program says it did: it took lock, printed its fencing token, and
// released it.
func runQuickStart(t *testing.T, dir, lock string, env []string, name string, args ...string) {
	t.Helper()
	h := startHarness(t)
	desc := h.Description()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LEASEGATE_URL="+desc.Gateways[0], "LEASEGATE_TOKEN="+desc.Tokens[conformance.TenantNormal])
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the quick start failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	m := tokenLine.FindSubmatch(out)
	if m == nil {
		t.Fatalf("the quick start printed no fencing token:\n%s", out)
	}
	if tok, err := strconv.ParseInt(string(m[1]), 10, 64); err != nil || tok <= 0 {
		t.Fatalf("the quick start printed fencing token %s; want a positive token", m[1])
	}
	var reqs struct {
		ByToken map[string]map[string]int64 `json:"byToken"`
	}
	getJSON(t, desc.Control+"/gateways/0/requests", &reqs)
	sent := reqs.ByToken[conformance.TenantNormal]
	if sent["/leasegate.v1.LockService/Acquire"] < 1 || sent["/leasegate.v1.LockService/Release"] < 1 {
		t.Errorf("gateway 0 saw %v with the normal token; want an Acquire and a Release", sent)
	}
	var holder struct {
		Held bool `json:"held"`
	}
	getJSON(t, desc.Control+queryName(lock), &holder)
	if holder.Held {
		t.Errorf("%s is still held after the quick start exited; it says it released it", lock)
	}
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}
