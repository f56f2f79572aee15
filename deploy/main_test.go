package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Set by TestMain.
var (
	// repoRoot is the repository's top directory.
	repoRoot string
	// binDir holds leasegate and leasectl as .ci/build made them.
	binDir string
	// helpFlags are the flags `leasegate --help` lists, by name.
	helpFlags map[string]helpFlag
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Dir(filepath.Dir(file))
	dir, err := os.MkdirTemp("", "leasegate-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	// The image's build command, run here so CI exercises exactly it.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, ".ci", "build"), binDir)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, ".ci/build %s: %v\n%s", binDir, err, out)
		return 1
	}
	out, err := leasegateOutput(nil, "--help")
	if err != nil {
		fmt.Fprintf(os.Stderr, "leasegate --help: %v\n%s", err, out)
		return 1
	}
	if helpFlags, err = parseHelp(out); err != nil {
		fmt.Fprintf(os.Stderr, "leasegate --help: %v\n%s", err, out)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines leaked: %v\n", err)
			return 1
		}
	}
	return code
}

// leasegate runs the built binary with args and exactly env (plus PATH), and
// returns its combined output. It never starts a server in these tests: each
// call either prints help or fails validation.
func leasegateOutput(env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "leasegate"), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.Dir = binDir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// validationSentinel is appended to a command line to learn whether the rest
// of it is a valid configuration without starting anything: server.Config
// checks the gateway limits last, so the only complaint about a command line
// that is otherwise valid is this one. If server.Config.Validate changes its
// order, pick another value it checks last.
const (
	validationSentinel     = "--max-body-bytes=1"
	validationSentinelWant = "MaxBodyBytes 1 is outside"
)

// checkValidConfig runs leasegate with args, env and the sentinel, and fails
// t unless the sentinel is the only complaint.
func checkValidConfig(t *testing.T, what string, env []string, args ...string) {
	t.Helper()
	out, err := leasegateOutput(env, append(append([]string(nil), args...), validationSentinel)...)
	if err == nil || !strings.Contains(out, validationSentinelWant) {
		t.Errorf("%s: leasegate %s (env %q) is not a valid configuration: %v\n%s", what, strings.Join(args, " "), env, err, out)
	}
}
