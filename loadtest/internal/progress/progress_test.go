package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestLine(t *testing.T) {
	l := Line("uncontested direct", 5*time.Second, 10*time.Second, 5000, 0, 30*time.Second)
	for _, want := range []string{"uncontested direct", " 50%", "5000 ops", "1000/s", "ETA 25s", "[============>"} {
		if !strings.Contains(l, want) {
			t.Errorf("Line = %q; want it to contain %q", l, want)
		}
	}
	// A count limit closer to done than the time wins.
	if l := Line("x", time.Second, 10*time.Second, 900, 1000, 10*time.Second); !strings.Contains(l, " 90%") {
		t.Errorf("Line = %q; want 90%% from the count limit", l)
	}
}

func TestDisabledBarWritesNothing(t *testing.T) {
	var b bytes.Buffer
	bar := New(&b, false, time.Minute)
	bar.Start("x", time.Second, 0, func() int64 { return 1 })
	bar.Done()
	if b.Len() != 0 {
		t.Errorf("disabled bar wrote %q", b.String())
	}
}

func TestEnabledBarDrawsAndClears(t *testing.T) {
	var b syncBuffer
	bar := New(&b, true, time.Second)
	bar.Start("phase", time.Second, 0, func() int64 { return 7 })
	time.Sleep(600 * time.Millisecond) // two redraws at 250 ms
	bar.Done()
	out := b.String()
	if !strings.Contains(out, "phase") || !strings.HasSuffix(out, "\r\033[K") {
		t.Errorf("bar output = %q; want a drawn line, cleared at the end", out)
	}
}
