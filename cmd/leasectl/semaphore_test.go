package main

import (
	"strings"
	"testing"
)

// TestLimitFlag: --limit 2 lets two tries hold at once, the third is not
// acquired, another limit is refused (exit 5) naming the name's, and
// describe shows the limit and both holders.
func TestLimitFlag(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	ep := []string{"--endpoint", g.URL, "-o", "json"}
	for i := 0; i < 2; i++ {
		if got := decode(t, runOK(t, append(ep, "try", "pool", "--limit", "2")...)); got["fencingToken"] == nil {
			t.Fatalf("try %d printed %v; want a lock", i, got)
		}
	}
	if r := run(t, nil, append(ep, "try", "pool", "--limit", "2")...); r.code != exitNotAcquired {
		t.Fatalf("third try exited %d, stderr %q; want %d", r.code, r.stderr, exitNotAcquired)
	}
	r := run(t, nil, append(ep, "acquire", "pool", "--limit", "3", "--wait", "1s")...)
	if r.code != exitRefused || !strings.Contains(r.stderr, "limit 2") || !strings.Contains(r.stderr, "--limit") {
		t.Fatalf("acquire with another limit exited %d, stderr %q; want %d naming limit 2 and --limit", r.code, r.stderr, exitRefused)
	}
	if d := decode(t, runOK(t, append(ep, "describe", "pool")...)); d["limit"] != float64(2) || d["holders"] != float64(2) {
		t.Fatalf("describe printed %v; want limit 2 and 2 holders", d)
	}
	if r := run(t, nil, append(ep, "try", "pool", "--limit", "-1")...); r.code != exitUsage {
		t.Fatalf("try --limit -1 exited %d; want %d", r.code, exitUsage)
	}
}
