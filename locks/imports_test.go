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
