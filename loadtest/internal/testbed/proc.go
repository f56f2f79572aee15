package testbed

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU is this process's CPU time so far (user + system, every thread):
// the gateway, the embedded etcd members and the load generator together.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RSS is this process's resident set size in bytes (VmRSS), or 0 where
// /proc is missing.
func RSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fs := strings.Fields(v)
			if len(fs) > 0 {
				kb, _ := strconv.ParseInt(fs[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; 100 on every
// Linux this runs on.
const clockTicks = 100

// processCPU reads another process's user + system time from /proc.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// The command name is in parentheses and may hold spaces: fields
	// count from after the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(fs[11], 10, 64)
	st, _ := strconv.ParseInt(fs[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}
