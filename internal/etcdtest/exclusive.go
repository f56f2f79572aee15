package etcdtest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// exclusivePath is the lock file shared by every test binary on the machine.
var exclusivePath = filepath.Join(os.TempDir(), "leasegate-exclusive-tests.lock")

// LockExclusive blocks until no other test binary holds the machine-wide
// lock for heavy or timing-sensitive tests, takes it and returns its
// release. `go test ./...` runs packages in parallel: a test that judges
// tail latency, and a harness that saturates the machine with processes,
// must not run at the same time. Cheap tests need no lock.
func LockExclusive() (release func(), err error) {
	f, err := os.OpenFile(exclusivePath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: open %s: %w", exclusivePath, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("etcdtest: lock %s: %w", exclusivePath, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// Exclusive takes the machine-wide lock for the rest of t.
func Exclusive(t testing.TB) {
	t.Helper()
	release, err := LockExclusive()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}
