package testbed

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// AllowedCPUs is the set of CPUs this process may run on: its main
// thread's affinity, which bounds any set it can pin itself to.
func AllowedCPUs() (CPUs, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(os.Getpid(), &set); err != nil {
		return nil, fmt.Errorf("%w: sched_getaffinity: %v", ErrNoAffinity, err)
	}
	var out CPUs
	for c := 0; c <= maxCPU && len(out) < set.Count(); c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// PinSelf restricts every thread of this process to cpus and sets
// GOMAXPROCS to their count; undo gives the threads back the affinity
// they had and GOMAXPROCS its default. A thread inherits its creator's
// affinity, so once every thread has the mask the threads started later
// have it too; pinning passes over the threads until one finds nothing to
// change, so a thread started from an unpinned one mid-pass is caught.
func PinSelf(cpus CPUs) (undo func(), err error) {
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(os.Getpid(), &was); err != nil {
		return nil, fmt.Errorf("%w: sched_getaffinity: %v", ErrNoAffinity, err)
	}
	var want unix.CPUSet
	for _, c := range cpus {
		want.Set(c)
	}
	if err := pinThreads(want); err != nil {
		_ = pinThreads(was)
		return nil, err
	}
	runtime.GOMAXPROCS(len(cpus))
	return func() {
		_ = pinThreads(was)
		runtime.SetDefaultGOMAXPROCS()
	}, nil
}

func pinThreads(want unix.CPUSet) error {
	for range 100 {
		tids, err := threads(os.Getpid())
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNoAffinity, err)
		}
		changed := false
		for _, tid := range tids {
			var got unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &got); err != nil {
				continue // the thread has exited
			}
			if got == want {
				continue
			}
			changed = true
			if err := unix.SchedSetaffinity(tid, &want); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("%w: sched_setaffinity(thread %d): %v", ErrNoAffinity, tid, err)
			}
		}
		if !changed {
			return nil
		}
	}
	return fmt.Errorf("%w: threads kept appearing with another affinity", ErrNoAffinity)
}

func threads(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

// ThreadCPUs reads back, from /proc, the CPU lists the threads of process
// pid may run on: one entry per distinct list, so a process pinned whole
// has exactly one.
func ThreadCPUs(pid int) ([]string, error) {
	tids, err := threads(pid)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, tid := range tids {
		v := procField(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid), "Cpus_allowed_list")
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("process %d: no Cpus_allowed_list in /proc", pid)
	}
	slices.Sort(out)
	return out, nil
}
