package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// logSink is a command's stderr that tests can wait on.
type logSink struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{} // receives after each write, when not full
}

func newLogSink() *logSink { return &logSink{written: make(chan struct{}, 1)} }

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	select {
	case s.written <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits until what was written contains sub, or the command ended
// (done), or bound passed; it reports whether sub was written.
func (s *logSink) waitFor(sub string, done <-chan struct{}, bound time.Duration) bool {
	timeout := time.After(bound)
	for !strings.Contains(s.String(), sub) {
		select {
		case <-s.written:
		case <-done:
			return strings.Contains(s.String(), sub)
		case <-timeout:
			return false
		}
	}
	return true
}

// background runs the leasegate command with args until stop, which
// returns its error; its stderr is the sink.
type background struct {
	logs   *logSink
	ended  chan struct{} // closed when the command returns err
	err    error
	cancel context.CancelFunc
}

func serveInBackground(t *testing.T, args ...string) *background {
	t.Helper()
	b := &background{logs: newLogSink(), ended: make(chan struct{})}
	cmd := newRootCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(b.logs)
	cmd.SetArgs(args)
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() {
		b.err = cmd.ExecuteContext(ctx)
		close(b.ended)
	}()
	t.Cleanup(func() { _ = b.stop(t) })
	return b
}

// serving waits until the gateway says it serves, failing the test if
// it ends or does not within a minute.
func (b *background) serving(t *testing.T) {
	t.Helper()
	if !b.logs.waitFor("leasegate serving", b.ended, time.Minute) {
		select {
		case <-b.ended:
			t.Fatalf("the gateway ended (%v) before serving; its log:\n%s", b.err, b.logs)
		default:
			t.Fatalf("the gateway did not start serving within a minute; its log:\n%s", b.logs)
		}
	}
}

// stop ends the command, as SIGTERM does, and returns its error.
func (b *background) stop(t *testing.T) error {
	t.Helper()
	b.cancel()
	select {
	case <-b.ended:
		return b.err
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not stop within 30s")
		return nil
	}
}
