package embedetcd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
)

// ErrDirInUse reports a data directory that another holder has locked
// (LockDir), in this process or another one.
var ErrDirInUse = errors.New("data directory in use")

// lockFileName is the file in a locked directory that the holder holds a
// lock on and writes its process id to.
const lockFileName = "leasegate.lock"

// DirLock is a process's hold on a data directory: every member holds one
// on its own directory while it runs, and a process may take one on a
// directory that holds several members' (LockDir).
//
// etcd opens its backend with a blocking flock on the database file and no
// timeout: a second member started on a directory in use would wait for it
// forever, deaf to everything, the process's signals included. So a member
// first takes this lock without waiting, and a directory in use is
// refused at once, naming the process that holds it. The operating system
// drops the lock when its holder exits, however it exits: a stale file
// left by a killed process is no obstacle. The file is never removed, so
// two members can never hold locks on two different files of one name.
type DirLock struct{ f *fileutil.LockedFile }

// LockDir takes dir's lock, creating dir (mode 0700, as etcd wants it) if
// it does not exist. It does not block: a directory another holder has,
// in this process or another, is refused with an error wrapping
// ErrDirInUse that names the directory and the holder's process id.
func LockDir(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := fileutil.TryLockFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fileutil.ErrLocked) {
		return nil, inUse(dir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	// The holder's pid, for the message of the next one refused; a
	// failure to write it costs only that message its pid.
	if f.Truncate(0) == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &DirLock{f: f}, nil
}

// inUse is the error for dir, whose lock file at path another member
// holds: it names that member's process when the file says which it is.
func inUse(dir, path string) error {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	raw, _ := os.ReadFile(path)
	if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && pid > 0 {
		return fmt.Errorf("%w: %s is held by process %d", ErrDirInUse, dir, pid)
	}
	// The holder has the lock but has not written its pid yet.
	return fmt.Errorf("%w: %s is held by another process", ErrDirInUse, dir)
}

// Unlock lets go of the directory. It is safe on nil and to call twice.
func (l *DirLock) Unlock() {
	if l != nil && l.f != nil {
		_ = l.f.Close() // closing the file releases its lock
		l.f = nil
	}
}
