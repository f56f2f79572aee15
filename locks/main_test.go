package locks

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine running. The
// ignored functions are goroutines etcd's own libraries keep for the life
// of the process.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreTopFunction("gopkg.in/natefinch/lumberjack%2ev2.(*Logger).millRun"),
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run"),
	)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
