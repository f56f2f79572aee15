// Package storetest checks a fence.Store against the contract every Store
// meets: the semantics of Accept and Highest (Semantics), fenced writes that
// race on the same keys (Race), and the Store behind fence.Middleware
// (Server). fence's own guards are tested with it, and so can a Store of
// your own be.
//
// It imports only fence and the standard library.
package storetest

import (
	"context"
	"testing"
	"time"
)

// testTimeout bounds each check's context: it turns a hung store into a
// failure, it synchronises nothing.
const testTimeout = 2 * time.Minute

// testCtx is a context for one test, cancelled at its end.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}
