// Package reload keeps a value loaded from files current while a process
// runs: bearer tokens, JWT keys, the listener's certificate.
//
// A change is noticed on use, not by a watcher: Get compares the files'
// modification time, size and identity (os.Stat, which follows symlinks)
// at most once per interval and loads again when any of them differs. That
// costs a few stat calls a second under load and nothing when idle, needs
// no goroutine to stop, and sees the symlink swap by which Kubernetes
// updates a mounted Secret, which an inotify watch on the file misses.
//
// The trap it avoids: a file caught half-written, or replaced by a bad
// one, must not drop every credential. A load that fails keeps the value
// in force and logs the error once; the next change of the files (the
// writer finishing, the operator fixing it) is loaded again.
package reload

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
)

// DefaultInterval is how often Get looks at the files by default.
const DefaultInterval = time.Second

// Options configures a Value.
type Options struct {
	// Name says what the files hold, for logs ("auth tokens file").
	Name string
	// Interval is the least time between two looks at the files. Default
	// DefaultInterval; negative looks at every Get (tests).
	Interval time.Duration
	// Clock tells the time. Default clock.Real.
	Clock clock.Clock
	// Log receives reloads and failed loads. Default: discarded.
	Log *slog.Logger
}

// Value is a value loaded from files, loaded again when they change.
// It is safe for concurrent use.
type Value[T any] struct {
	paths []string
	load  func() (T, error)
	opt   Options

	cur atomic.Pointer[T]

	mu   sync.Mutex // held by the one caller that looks at the files
	next time.Time  // when the files are next looked at; guarded by mu
	seen []stamp    // the files as last loaded, or tried; guarded by mu
}

// stamp is what a file's change is recognized by.
type stamp struct {
	info os.FileInfo
	err  error
}

func (s stamp) same(o stamp) bool {
	if s.err != nil || o.err != nil {
		return s.err != nil && o.err != nil
	}
	return os.SameFile(s.info, o.info) && s.info.ModTime().Equal(o.info.ModTime()) && s.info.Size() == o.info.Size()
}

// New loads the value from paths with load and returns it; the first load
// must succeed.
func New[T any](paths []string, load func() (T, error), opt Options) (*Value[T], error) {
	if opt.Interval == 0 {
		opt.Interval = DefaultInterval
	}
	if opt.Clock == nil {
		opt.Clock = clock.Real
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	v := &Value[T]{paths: paths, load: load, opt: opt}
	seen := v.stamps()
	x, err := load()
	if err != nil {
		return nil, err
	}
	v.cur.Store(&x)
	v.seen, v.next = seen, opt.Clock.Now().Add(opt.Interval)
	return v, nil
}

// Get returns the value, loading it again first when the interval has
// passed and a file has changed. A caller that finds another one looking
// at the files does not wait for it: it gets the value in force.
func (v *Value[T]) Get() T {
	if v.mu.TryLock() {
		if now := v.opt.Clock.Now(); !now.Before(v.next) {
			v.next = now.Add(v.opt.Interval)
			_ = v.checkLocked()
		}
		v.mu.Unlock()
	}
	return *v.cur.Load()
}

// Check looks at the files now and loads the value again if one changed,
// whatever the interval: the hook for a SIGHUP or a test. It returns the
// load's error; the value in force is then kept.
func (v *Value[T]) Check() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.checkLocked()
}

func (v *Value[T]) checkLocked() error {
	now := v.stamps()
	changed := false
	for i := range now {
		if !now[i].same(v.seen[i]) {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	v.seen = now
	x, err := v.load()
	if err != nil {
		v.opt.Log.Error("reload failed; keeping the previous "+v.opt.Name, "files", v.paths, "err", err)
		return fmt.Errorf("%s: %w", v.opt.Name, err)
	}
	v.cur.Store(&x)
	v.opt.Log.Info("reloaded "+v.opt.Name, "files", v.paths)
	return nil
}

func (v *Value[T]) stamps() []stamp {
	out := make([]stamp, len(v.paths))
	for i, p := range v.paths {
		out[i].info, out[i].err = os.Stat(p)
	}
	return out
}
