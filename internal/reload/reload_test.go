package reload_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/reload"
)

// write replaces path's content the way an operator's tooling does: a new
// file renamed over the old one.
func write(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestValueFollowsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "word")
	write(t, path, "one")
	load := func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		if s := strings.TrimSpace(string(b)); s != "" && !strings.HasPrefix(s, "bad") {
			return s, nil
		}
		return "", errors.New("not a word")
	}
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	v, err := reload.New([]string{path}, load, reload.Options{Name: "word file", Interval: time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		content string // "" leaves the file alone
		advance time.Duration
		want    string
	}{
		{"two", 0, "one"},           // changed, but the interval has not passed
		{"", time.Second, "two"},    // now it is looked at
		{"bad", time.Second, "two"}, // a bad file keeps the value in force
		{"", time.Second, "two"},    // and is not loaded again while unchanged
		{"three", time.Second, "three"},
	}
	for i, s := range steps {
		if s.content != "" {
			write(t, path, s.content)
		}
		clk.Advance(s.advance)
		if got := v.Get(); got != s.want {
			t.Errorf("step %d: Get() = %q; want %q", i, got, s.want)
		}
	}
	write(t, path, "bad again")
	if err := v.Check(); err == nil || v.Get() != "three" {
		t.Errorf("Check() of a bad file = %v, value %q; want an error and %q kept", err, v.Get(), "three")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := v.Check(); err == nil || v.Get() != "three" {
		t.Errorf("Check() of a removed file = %v, value %q; want an error and %q kept", err, v.Get(), "three")
	}
}

func TestNewNeedsAGoodFirstLoad(t *testing.T) {
	_, err := reload.New([]string{filepath.Join(t.TempDir(), "missing")}, func() (int, error) { return 0, errors.New("no file") }, reload.Options{})
	if err == nil {
		t.Fatal("New with a failing first load succeeded")
	}
}
