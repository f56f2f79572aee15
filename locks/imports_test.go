package locks_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The layers point down: gateway → locks → queue and shard. queue knows
// nothing of sharding and shard nothing of locks; only locks joins them,
// and neither reaches up into the wire API.
func TestLayers(t *testing.T) {
	const module = "github.com/leasegate/leasegate/"
	for pkg, forbidden := range map[string][]string{
		"shard": {module + "queue", module + "locks", module + "gateway"},
		"queue": {module + "shard", module + "locks", module + "gateway"},
		"locks": {module + "gateway"},
	} {
		out, err := exec.Command("go", "list", "-deps", "../"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if dep == f {
					t.Errorf("package %s depends on %s; want the dependencies to point down (gateway → locks → queue, shard)", pkg, dep)
				}
			}
		}
	}
}

// internal/ holds leaves, the assembly and test harnesses, apart: the
// leaves (clocks, build info, telemetry, the embedded etcd, test certificates, …) import no
// package of the product above them, so anything may use them; only the
// assembly (internal/server) and the harnesses that start it (gwtest,
// sdktest, fencetest, modules) sit on top.
func TestInternalLeavesImportNothingAbove(t *testing.T) {
	const module = "github.com/leasegate/leasegate/"
	leaves := []string{"buildinfo", "clock", "depfence", "embedetcd", "etcdtest", "netfault", "reload", "telemetry", "testpki", "timingtest"}
	isLeaf := map[string]bool{}
	for _, l := range leaves {
		isLeaf[module+"internal/"+l] = true
	}
	for _, l := range leaves {
		out, err := exec.Command("go", "list", "-deps", "../internal/"+l).CombinedOutput()
		if err != nil {
			t.Fatalf("go list internal/%s: %v\n%s", l, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, module) && !isLeaf[dep] {
				t.Errorf("internal/%s depends on %s; want a leaf to import only other leaves", l, dep)
			}
		}
	}
}
