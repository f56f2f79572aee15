//go:build linux

package chaos

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasegate/leasegate/internal/etcdtest"
)

var (
	longFlag = flag.Bool("chaos.long", false, "run the long mode (≥ 200 injections) and print the report; also LEASEGATE_CHAOS=long")
	outFlag  = flag.String("chaos.out", "", "directory for histories and logs; also LEASEGATE_CHAOS_OUT (default: the artifact directory with -artifacts, else a kept-on-failure temp dir)")
	seedFlag = flag.Uint64("chaos.seed", 0, "nemesis seed (0: from the clock)")
	injFlag  = flag.Int("chaos.injections", 0, "override the number of injections")
	binFlag  = flag.String("chaos.bin", "", "run the leasegate and leasectl binaries in this directory instead of building them (another build); the etcd members are always built from this checkout")
)

// bins are the binaries TestMain builds once (or -chaos.bin names).
var bins Binaries

func TestMain(m *testing.M) {
	RunRole() // a child process of the harness never returns from here
	// Under nohup every process the harness starts would inherit an
	// ignored SIGHUP, which leasectl keeps by design, and the hangup
	// injections would test nohup. A caught signal is reset to its default
	// across exec: catch it here, so the processes start as from a shell.
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
	flag.Parse()
	built, err := os.MkdirTemp("", "leasegate-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pkgs := []string{"github.com/leasegate/leasegate/loadtest/chaos/etcdmember"}
	dir := *binFlag
	if dir == "" {
		dir = built
		pkgs = append(pkgs, "github.com/leasegate/leasegate/cmd/leasegate", "github.com/leasegate/leasegate/cmd/leasectl")
	}
	build := exec.Command("go", append([]string{"build", "-o", built}, pkgs...)...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: build the harness's binaries:", err)
		os.RemoveAll(built)
		os.Exit(1)
	}
	bins = Binaries{
		Leasegate:  filepath.Join(dir, "leasegate"),
		Leasectl:   filepath.Join(dir, "leasectl"),
		EtcdMember: filepath.Join(built, "etcdmember"),
	}
	// Without python3 the Python actor is skipped, and the run says so.
	if py, err := exec.LookPath("python3"); err == nil {
		bins.Python = py
		bins.PythonSDK, _ = filepath.Abs(filepath.Join("..", "..", "sdk", "python"))
	}
	code := runChecked(m)
	os.RemoveAll(built)
	os.Exit(code)
}

// runChecked runs the tests and the leak check.
func runChecked(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(etcdtest.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: goroutine leak:", err)
			code = 1
		}
	}
	return code
}

// outDir picks the run's output directory and says whether to remove it
// when the test passes.
func outDir(t *testing.T) string {
	t.Helper()
	dir := *outFlag
	if dir == "" {
		dir = os.Getenv("LEASEGATE_CHAOS_OUT")
	}
	if dir != "" {
		dir = filepath.Join(dir, t.Name()+"-"+time.Now().Format("20060102-150405"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		return t.ArtifactDir()
	}
	dir, err := os.MkdirTemp("", "leasegate-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("histories and logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// TestChaos runs the workload under faults and checks its history: the
// quick mode by default, the long mode with LEASEGATE_CHAOS=long or
// -chaos.long.
func TestChaos(t *testing.T) {
	cfg := QuickConfig()
	if *longFlag || os.Getenv("LEASEGATE_CHAOS") == "long" {
		cfg = LongConfig()
	} else if testing.Short() {
		t.Skip("chaos: quick mode takes about two minutes; skipped with -short")
	}
	if *injFlag > 0 {
		cfg.Injections = *injFlag
	}
	cfg.Seed = *seedFlag
	out := outDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	res, err := Run(ctx, cfg, bins, out, t.Logf)
	if err != nil {
		t.Fatalf("harness: %v (logs in %s)", err, out)
	}
	var rep bytes.Buffer
	res.Report(&rep, cfg.TTL, cfg.AttemptTTL)
	_ = os.WriteFile(filepath.Join(out, "report.txt"), rep.Bytes(), 0o644)
	if cfg.Report {
		fmt.Print(rep.String())
	} else {
		t.Logf("\n%s", rep.String())
	}
	// A violation put down to an open bug is reported; one put down to a
	// fixed bug is a regression and fails like any other.
	failed := 0
	for _, v := range res.Violations {
		if openBugs[v.Known] {
			t.Logf("[%s, open bug %s] %s: %s", v.Check, v.Known, v.Name, v.Detail)
			continue
		}
		failed++
		if v.Attributed != "" {
			t.Errorf("[%s, at the moment of %s] %s: %s", v.Check, v.Attributed, v.Name, v.Detail)
			continue
		}
		t.Errorf("[%s] %s: %s", v.Check, v.Name, v.Detail)
	}
	if failed > 0 {
		t.Logf("histories (history.json, result.json, register.html) and logs in %s", out)
	}
}
