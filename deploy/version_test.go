package deploy_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHelpNamesEnv: `leasegate --help` names each flag's environment
// variable, and it is the one applyEnv reads (LEASEGATE_<FLAG>).
func TestHelpNamesEnv(t *testing.T) {
	for _, name := range sortedKeys(helpFlags) {
		if f := helpFlags[name]; f.Env != envName(name) {
			t.Errorf("leasegate --help: --%s names environment variable %q; want [$%s]", name, f.Env, envName(name))
		}
	}
}

// TestDockerfileStampsVersion: the image passes its VERSION and REVISION
// build arguments to .ci/build.
func TestDockerfileStampsVersion(t *testing.T) {
	var args []string
	for _, in := range readDockerfile(t) {
		if in.cmd == "ARG" {
			args = append(args, strings.Fields(in.args)...)
		}
		if in.cmd == "RUN" && strings.Contains(in.args, ".ci/build") {
			for _, want := range []string{"VERSION=$VERSION", "REVISION=$REVISION"} {
				if !strings.Contains(in.args, want) {
					t.Errorf("Dockerfile: RUN %q does not pass %s to .ci/build", in.args, want)
				}
			}
		}
	}
	for _, want := range []string{"VERSION", "REVISION"} {
		found := false
		for _, a := range args {
			found = found || a == want || strings.HasPrefix(a, want+"=")
		}
		if !found {
			t.Errorf("Dockerfile declares ARG %q; want %s among them", args, want)
		}
	}
}

// TestVersionStamped builds the binaries as the image does with VERSION and
// REVISION set, and checks that both print them for --version and that the
// gateway's leasegate_build_info carries the same version.
func TestVersionStamped(t *testing.T) {
	const version, revision = "v0.0.0-deploytest", "0123456789ab"
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, filepath.Join(repoRoot, ".ci", "build"), dir)
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "VERSION="+version, "REVISION="+revision)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("VERSION=%s REVISION=%s .ci/build: %v\n%s", version, revision, err, out)
	}
	bad := exec.CommandContext(ctx, filepath.Join(repoRoot, ".ci", "build"), t.TempDir())
	bad.Dir = repoRoot
	bad.Env = append(os.Environ(), "VERSION=v1 -X main.evil=1")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "VERSION and REVISION may hold only") {
		t.Errorf("VERSION with a space: .ci/build = %v; want it refused\n%s", err, out)
	}
	for _, bin := range []string{"leasegate", "leasectl"} {
		out, err := exec.CommandContext(ctx, filepath.Join(dir, bin), "--version").CombinedOutput()
		want := fmt.Sprintf("%s %s (revision %s, ", bin, version, revision)
		if err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("%s --version = %q, %v; want it to start %q", bin, out, err, want)
		}
	}

	addr := freeAddr(t)
	gw := exec.CommandContext(ctx, filepath.Join(dir, "leasegate"), "--listen="+addr, "--data-dir="+filepath.Join(dir, "data"), "--log-level=warn")
	gw.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	gw.Stdout, gw.Stderr = os.Stderr, os.Stderr
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = gw.Process.Signal(syscall.SIGTERM)
		_ = gw.Wait()
	}()
	body := scrapeWhenUp(t, ctx, "http://"+addr+"/metrics")
	re := regexp.MustCompile(`(?m)^leasegate_build_info\{[^}]*\bversion="([^"]*)"[^}]*\} 1$`)
	m := re.FindStringSubmatch(body)
	if m == nil || m[1] != version {
		t.Errorf("/metrics: leasegate_build_info = %q; want version=%q\n%s", m, version, grepLines(body, "leasegate_build_info"))
	}
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrapeWhenUp polls url until it answers 200 and returns the body.
func scrapeWhenUp(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var sb strings.Builder
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				sb.WriteString(sc.Text() + "\n")
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return sb.String()
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("GET %s: no answer within a minute (last error %v)", url, err)
		case <-tick.C:
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
