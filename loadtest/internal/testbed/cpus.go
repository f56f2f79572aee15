package testbed

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

var (
	// ErrNoAffinity is returned where CPU affinity cannot be set: off
	// Linux, or when the kernel refuses it.
	ErrNoAffinity = errors.New("CPU affinity is not available")
	// ErrTooFewCPUs is returned for a pinned setup on a machine (or in a
	// cpuset) of fewer than two CPUs.
	ErrTooFewCPUs = errors.New("the pinned setup needs at least 2 CPUs")
)

// maxCPU bounds the CPU numbers a list may name.
const maxCPU = 1023

// CPUs is a set of CPU numbers, ascending and without repeats.
type CPUs []int

// ParseCPUs reads a list as taskset -c writes it: "0", "1,3", "0-2,5".
func ParseCPUs(s string) (CPUs, error) {
	var out CPUs
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b > maxCPU {
			return nil, fmt.Errorf("CPU list %q: %q is not a CPU number or range within 0 to %d (want e.g. 0 or 0-1,3)", s, part, maxCPU)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// String writes the set as ParseCPUs reads it, ranges folded.
func (c CPUs) String() string {
	var parts []string
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(c[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", c[i], c[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// Without returns the CPUs of c that are not in o.
func (c CPUs) Without(o CPUs) CPUs {
	var out CPUs
	for _, x := range c {
		if !slices.Contains(o, x) {
			out = append(out, x)
		}
	}
	return out
}
