// Package timingtest gates the checks that judge speed — tail latencies,
// "answered within N ms" — rather than correctness. They measure the
// machine as much as the code: beside other test binaries (go test ./...
// runs packages at once) they fail for reasons of load. So they run only
// when asked, with LEASEGATE_TIMING=1, on an otherwise idle machine:
//
//	LEASEGATE_TIMING=1 go test ./gateway ./queue -run 'Flood|DeadHolder|FailsFast' -count=1
//
// Bounds that are themselves the property under test ("a waiter is not
// granted before the dead holder's deadline", "a wait ends by its
// timeout") are not timing judgements and always run.
package timingtest

import (
	"os"
	"testing"
)

// EnvVar is the environment variable that turns the timing judgements on.
const EnvVar = "LEASEGATE_TIMING"

// Enabled reports whether EnvVar is set to 1.
func Enabled() bool { return os.Getenv(EnvVar) == "1" }

// Require skips tb unless the timing judgements are enabled.
func Require(tb testing.TB) {
	tb.Helper()
	if !Enabled() {
		tb.Skipf("judges timing; set %s=1 to run it on an idle machine", EnvVar)
	}
}
