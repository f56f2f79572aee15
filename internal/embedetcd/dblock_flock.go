//go:build !windows && !plan9 && !solaris && !aix && !android

package embedetcd

import (
	"errors"
	"os"
	"syscall"
)

// tryDatabaseLock reports whether another open file holds the flock bbolt
// takes on the database at path (bbolt's bolt_unix.go, on the systems its
// build tags name): it takes the lock without waiting and lets go of it at
// once. A missing file is a member that has not started yet: not held.
func tryDatabaseLock(path string) (held bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	defer f.Close() // closing the file lets go of its lock
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}
