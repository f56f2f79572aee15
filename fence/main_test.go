package fence_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// leakWait bounds how long TestMain waits for the tests' goroutines to end:
// an HTTP client's connection goroutines, for one, end a moment after the
// server closes the connection.
const leakWait = 10 * time.Second

// TestMain fails a passing run that leaves goroutines behind. The fence
// module requires nothing but what the package imports, so the check is
// the standard library's goroutine count rather than goleak.
func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		if err := leaked(before); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// leaked waits up to leakWait for the number of goroutines to fall back to
// want, and otherwise returns an error carrying every goroutine's stack.
func leaked(want int) error {
	deadline := time.Now().Add(leakWait)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			return fmt.Errorf("leaked goroutines: %d running after the tests, %d before:\n%s", runtime.NumGoroutine(), want, buf)
		}
		// No event announces a goroutine's end: poll, as goleak does.
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// testCtx is a context for one test, cancelled at its end.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
