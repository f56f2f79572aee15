package embedetcd

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ErrDatabaseInUse reports a member whose etcd database file another
// program holds the lock of: an etcd started by hand on the member's
// directory, an etcdutl snapshot or defrag, a backup tool.
var ErrDatabaseInUse = errors.New("etcd database in use")

// databasePath is where etcd keeps the database (bbolt) of the member
// whose data directory is dir.
func databasePath(dir string) string { return filepath.Join(dir, "member", "snap", "db") }

// checkDatabase refuses a member whose database another program holds.
//
// etcd opens its database with bbolt, which takes an exclusive lock on the
// file and retries without end while another holder has it: the member's
// directory lock (LockDir) keeps out only members that take it, not an
// etcd or etcdutl run by hand. So before etcd starts, the lock is tried
// once without waiting and let go at once. A holder that takes it after
// this check makes etcd wait, which StartTimeout then ends (startMember).
// Where the lock cannot be tried (tryDatabaseLock) the check passes.
func checkDatabase(dir string) error {
	path := databasePath(dir)
	held, err := tryDatabaseLock(path)
	if err != nil || !held {
		// A database that cannot be opened or locked here is etcd's to
		// report: it opens the file itself next.
		return nil
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	who := "another program"
	if pid := databaseLockHolder(path); pid > 0 {
		who = fmt.Sprintf("process %d", pid)
	}
	return fmt.Errorf("%w: %s is locked by %s (an etcd on this directory, an etcdutl snapshot or defrag, a backup?); etcd would wait for it without end: stop that program, then start again", ErrDatabaseInUse, path, who)
}
