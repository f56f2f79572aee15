package embedetcd

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestBreakDatabaseHeldByAnotherProgramHangs: the directory lock is
// leasegate's own file, but what blocks etcd forever is the flock bbolt
// takes on the database file. Any other holder of that flock — an etcd
// started by hand on the member directory, an etcdutl snapshot or defrag,
// a backup tool — is not seen by LockDir, and Start then hangs in etcd's
// backend open, past its StartTimeout and deaf to signals, which is what
// the directory lock was to prevent.
func TestBreakDatabaseHeldByAnotherProgramHangs(t *testing.T) {
	dir := t.TempDir()
	srv, err := startIn(t, dir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	db := filepath.Join(dir, "m.etcd", "member", "snap", "db")
	f, err := os.OpenFile(db, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		srv, err := Start(Config{Name: "m", Dir: dir, UnsafeNoFsync: true, StartTimeout: 2 * time.Second})
		if err == nil {
			srv.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Start on a database another program holds succeeded")
		}
		t.Logf("refused: %v", err)
	case <-time.After(10 * time.Second):
		// Release the flock so the stuck Start can finish and the test
		// leaves nothing behind.
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		if err := <-done; err == nil {
			t.Log("(it started once the flock was released)")
		}
		t.Fatal("Start with StartTimeout 2 s did not return in 10 s: it hangs on the database another program holds")
	}
}
