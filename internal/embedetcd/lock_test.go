package embedetcd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startIn starts a member under dir, or fails the test if Start does not
// return within bound: a member that waits on a held directory never does.
func startIn(t *testing.T, dir string, bound time.Duration) (*Server, error) {
	t.Helper()
	type result struct {
		srv *Server
		err error
	}
	done := make(chan result, 1)
	go func() {
		srv, err := Start(Config{Name: "m", Dir: dir, UnsafeNoFsync: true})
		done <- result{srv, err}
	}()
	select {
	case r := <-done:
		return r.srv, r.err
	case <-time.After(bound):
		t.Fatalf("Start on %s did not return within %s: it waits on the directory", dir, bound)
		return nil, nil
	}
}

// A second member on a directory in use is refused at once, naming the
// directory and the process that holds it; once the holder stops, the
// directory starts again.
func TestSecondMemberOnADirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	first, err := startIn(t, dir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if first != nil {
			first.Close()
		}
	}()
	start := time.Now()
	second, err := startIn(t, dir, 10*time.Second)
	if err == nil {
		second.Close()
		t.Fatal("a second member on a directory in use started")
	}
	member := filepath.Join(dir, "m.etcd")
	pid := fmt.Sprintf("process %d", os.Getpid())
	if !errors.Is(err, ErrDirInUse) || !strings.Contains(err.Error(), member) || !strings.Contains(err.Error(), pid) {
		t.Fatalf("second member on %s = %v; want ErrDirInUse naming the directory and %s", member, err, pid)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %s; want it at once", d)
	}
	first.Close()
	first = nil
	again, err := startIn(t, dir, time.Minute)
	if err != nil {
		t.Fatalf("restart on %s after its member stopped = %v", dir, err)
	}
	again.Close()
}

// LockDir is what a member takes: a second holder is refused without
// waiting, the first one's Unlock frees the directory, and a file left by
// a holder that is gone is no obstacle.
func TestLockDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	l, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("LockDir(%s) made %v (%v); want a directory of mode 0700", dir, fi, err)
	}
	if _, err := LockDir(dir); !errors.Is(err, ErrDirInUse) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("second LockDir(%s) = %v; want ErrDirInUse naming process %d", dir, err, os.Getpid())
	}
	l.Unlock()
	l.Unlock() // twice is harmless
	l2, err := LockDir(dir)
	if err != nil {
		t.Fatalf("LockDir after Unlock = %v", err)
	}
	l2.Unlock()
	var none *DirLock
	none.Unlock()

	// Not a directory: the error names the path.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LockDir(filepath.Join(file, "sub")); err == nil || errors.Is(err, ErrDirInUse) || !strings.Contains(err.Error(), file) {
		t.Fatalf("LockDir under a file = %v; want an error naming %s", err, file)
	}
}
