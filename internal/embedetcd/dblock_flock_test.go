//go:build !windows && !plan9 && !solaris && !aix && !android

package embedetcd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartRefusesADatabaseAnotherProgramHolds: the directory lock is
// leasegate's own file, but what would block etcd forever is the flock
// bbolt takes on the database file. Any other holder of that flock — an
// etcd started by hand on the member directory (exclusive), an etcdutl
// snapshot or a backup reading it (shared) — makes Start refuse at once,
// long before its StartTimeout, with ErrDatabaseInUse naming the file
// and, on Linux, the holder's process; the refusal leaves the directory
// free, and once the holder lets go the member starts.
func TestStartRefusesADatabaseAnotherProgramHolds(t *testing.T) {
	dir := t.TempDir()
	srv, err := startIn(t, dir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	db, err := filepath.Abs(filepath.Join(dir, "m.etcd", "member", "snap", "db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		how  string
		mode int
	}{{"exclusive", syscall.LOCK_EX}, {"shared", syscall.LOCK_SH}} {
		f, err := os.OpenFile(db, os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), tc.mode|syscall.LOCK_NB); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		srv, err := startIn(t, dir, 10*time.Second) // StartTimeout is the default minute
		if err == nil {
			srv.Close()
			f.Close()
			t.Fatalf("%s flock: Start on a database another program holds succeeded", tc.how)
		}
		if !errors.Is(err, ErrDatabaseInUse) || !strings.Contains(err.Error(), db) || !strings.Contains(err.Error(), "stop that program") {
			t.Errorf("%s flock: Start = %v; want ErrDatabaseInUse naming %s and what to do", tc.how, err, db)
		}
		if pid := fmt.Sprintf("process %d", os.Getpid()); runtime.GOOS == "linux" && !strings.Contains(err.Error(), pid) {
			t.Errorf("%s flock: Start = %v; want it to name the holder, %s", tc.how, err, pid)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s flock: the refusal took %s; want it at once", tc.how, d)
		}
		f.Close() // lets go of the flock
	}
	srv, err = startIn(t, dir, time.Minute)
	if err != nil {
		t.Fatalf("Start once the database is free: %v", err)
	}
	srv.Close()
}
