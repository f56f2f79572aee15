//go:build linux

package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcessesThatExitOnTheirOwnAreCrashes: a child that exits without
// the harness asking — whatever its status — is a crash; one the harness
// killed or asked to end (SIGTERM) is not.
func TestProcessesThatExitOnTheirOwnAreCrashes(t *testing.T) {
	dir := t.TempDir()
	start := func(script string) *proc {
		t.Helper()
		p, err := startProc("child", "/bin/sh", []string{"-c", script}, os.Environ(), filepath.Join(dir, "child.log"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, status := range []string{"0", "2"} {
		if p := start("exit " + status); !p.unasked() {
			t.Errorf("a child that exited %s by itself was not a crash", status)
		}
	}
	p := start("sleep 60")
	p.kill()
	if p.unasked() {
		t.Error("a killed child was a crash")
	}
	p = start("trap 'exit 0' TERM; sleep 60 & wait")
	time.Sleep(100 * time.Millisecond) // let the shell set its trap
	if err := p.end(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.kill()
		t.Fatal("the child did not end on SIGTERM")
	}
	if p.unasked() {
		t.Error("a child asked to end was a crash")
	}
}

// TestCrashLinesQuoteTheLastRunsPanic: a crash is reported with the panic
// of the process's last run, up to its first frame in leasegate's code.
func TestCrashLinesQuoteTheLastRunsPanic(t *testing.T) {
	log := strings.Join([]string{
		"=== 2026-12-02T03:00:00Z start /bin/leasegate --listen a",
		"panic: an earlier run's",
		"=== 2026-12-02T03:10:00Z exit: exit status 2",
		"=== 2026-12-02T03:20:00Z start /bin/leasegate --listen a",
		`{"level":"WARN","msg":"call"}`,
		"panic: runtime error: invalid memory address or nil pointer dereference",
		"[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x874c31]",
		"",
		"goroutine 8077 [running]:",
		"net/http.(*http2responseWriter).SetWriteDeadline(0xd8ec8265b60, {0xcaa987?, 0x15edf20?, 0x0?})",
		"	/usr/local/go/src/net/http/h2_bundle.go:6831 +0x31",
		"github.com/leasegate/leasegate/gateway.(*Service).send.func1()",
		"	/work/main/gateway/edge.go:225 +0x25",
		"more frames",
		"=== 2026-12-02T03:29:17Z exit: exit status 2",
	}, "\n")
	path := filepath.Join(t.TempDir(), "g0.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := crashLines(path)
	for _, want := range []string{"panic: runtime error: invalid memory address", "SetWriteDeadline", "gateway/edge.go:225"} {
		if !strings.Contains(got, want) {
			t.Errorf("crashLines = %q; want it to contain %q", got, want)
		}
	}
	for _, not := range []string{"an earlier run's", "more frames"} {
		if strings.Contains(got, not) {
			t.Errorf("crashLines = %q; want nothing of %q", got, not)
		}
	}
	if err := os.WriteFile(path, []byte("=== x start y\nshutting down\n=== z exit: exit status 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := crashLines(path); got != "" {
		t.Errorf("crashLines of a log without a panic = %q; want nothing", got)
	}
}
