package fence

import (
	"context"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStaleTokenError(t *testing.T) {
	var err error = &StaleTokenError{Resource: "order:42", Token: 10, Highest: 11}
	if want := `fence: stale token 10 for "order:42": highest accepted is 11`; err.Error() != want {
		t.Errorf("Error() = %q; want %q", err.Error(), want)
	}
	wrapped := errors.Join(errors.New("context"), err)
	if !errors.Is(wrapped, ErrStaleToken) {
		t.Errorf("errors.Is(%v, ErrStaleToken) = false; want true", wrapped)
	}
	var se *StaleTokenError
	if !errors.As(wrapped, &se) || se.Token != 10 || se.Highest != 11 {
		t.Errorf("errors.As(%v) = %+v; want Token 10, Highest 11", wrapped, se)
	}
	if errors.Is(err, ErrInvalidToken) {
		t.Errorf("errors.Is(%v, ErrInvalidToken) = true; want false", err)
	}
}

// testStoreSemantics is the contract every Store meets. Resource names are
// prefixed so stores backed by shared databases start empty.
func testStoreSemantics(t *testing.T, s Store) {
	ctx := testCtx(t)
	res := "order:42"
	if _, ok, err := s.Highest(ctx, res); err != nil || ok {
		t.Fatalf("Highest(%q) on empty store = _, %v, %v; want false, nil", res, ok, err)
	}
	steps := []struct {
		token   int64
		highest int64 // wanted highest token after the step
		stale   bool
	}{
		{10, 10, false}, // first write of a key
		{10, 10, false}, // same holder again
		{11, 11, false}, // newer holder
		{10, 11, true},  // the paused holder wakes up
		{11, 11, false}, // equal passes after a refusal
		{9, 11, true},
		{100, 100, false}, // more digits: numeric, not text, order
		{99, 100, true},
	}
	for i, st := range steps {
		err := s.Accept(ctx, res, st.token)
		if st.stale {
			var se *StaleTokenError
			if !errors.Is(err, ErrStaleToken) || !errors.As(err, &se) {
				t.Fatalf("step %d: Accept(%q, %d) = %v; want a stale token error", i, res, st.token, err)
			}
			if se.Resource != res || se.Token != st.token || se.Highest != st.highest {
				t.Fatalf("step %d: Accept(%q, %d) = %+v; want Token %d, Highest %d", i, res, st.token, se, st.token, st.highest)
			}
			want := "fence: stale token " + strconv.FormatInt(st.token, 10) + ` for "order:42": highest accepted is ` + strconv.FormatInt(st.highest, 10)
			if err.Error() != want {
				t.Fatalf("step %d: error %q; want %q", i, err, want)
			}
		} else if err != nil {
			t.Fatalf("step %d: Accept(%q, %d) = %v; want nil", i, res, st.token, err)
		}
		if h, ok, err := s.Highest(ctx, res); err != nil || !ok || h != st.highest {
			t.Fatalf("step %d: Highest(%q) = %d, %v, %v; want %d, true, nil", i, res, h, ok, err, st.highest)
		}
	}
	// Keys are independent.
	if err := s.Accept(ctx, "order:43", 1); err != nil {
		t.Errorf("Accept(order:43, 1) = %v; want nil", err)
	}
	// The largest token still orders correctly.
	const maxToken = int64(^uint64(0) >> 1)
	if err := s.Accept(ctx, "big", maxToken-1); err != nil {
		t.Errorf("Accept(big, max-1) = %v; want nil", err)
	}
	if err := s.Accept(ctx, "big", maxToken); err != nil {
		t.Errorf("Accept(big, max) = %v; want nil", err)
	}
	if err := s.Accept(ctx, "big", maxToken-1); !errors.Is(err, ErrStaleToken) {
		t.Errorf("Accept(big, max-1) after max = %v; want ErrStaleToken", err)
	}
	if err := s.Accept(ctx, "", 1); !errors.Is(err, ErrEmptyResource) {
		t.Errorf(`Accept("", 1) = %v; want ErrEmptyResource`, err)
	}
	if err := s.Accept(ctx, "neg", -1); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("Accept(neg, -1) = %v; want ErrInvalidToken", err)
	}
	if _, ok, err := s.Highest(ctx, "neg"); err != nil || ok {
		t.Errorf("Highest(neg) after a refused -1 = _, %v, %v; want false, nil", ok, err)
	}
}

func TestMemorySemantics(t *testing.T) { testStoreSemantics(t, NewMemory()) }

func TestMemoryWriteRunsOnlyWhenAccepted(t *testing.T) {
	ctx := testCtx(t)
	m := NewMemory()
	var wrote []int64
	write := func(token int64) error {
		return m.Write(ctx, "k", token, func() error { wrote = append(wrote, token); return nil })
	}
	for _, tok := range []int64{5, 7, 6, 7} {
		_ = write(tok)
	}
	if want := []int64{5, 7, 7}; !slices.Equal(wrote, want) {
		t.Errorf("fn ran for %v; want %v", wrote, want)
	}
	// A failing fn records nothing.
	boom := errors.New("boom")
	if err := m.Write(ctx, "k", 9, func() error { return boom }); err != boom {
		t.Errorf("Write with failing fn = %v; want %v", err, boom)
	}
	if h, _, _ := m.Highest(ctx, "k"); h != 7 {
		t.Errorf("Highest after failed write = %d; want 7", h)
	}
}

func TestMemoryWaitHonoursContext(t *testing.T) {
	ctx := testCtx(t)
	m := NewMemory()
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- m.Write(ctx, "k", 1, func() error { close(inside); <-release; return nil })
	}()
	<-inside
	// The first write holds "k": this one can only end by its deadline.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := m.Accept(short, "k", 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Accept while another write holds the key = %v; want DeadlineExceeded", err)
	}
	if err := m.Accept(ctx, "other", 2); err != nil {
		t.Errorf("Accept on another key while k is held = %v; want nil", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := m.Accept(ctx, "k", 2); err != nil {
		t.Errorf("Accept after release = %v; want nil", err)
	}
}

// TestDependencyFence keeps fence free of leasegate's server side: a
// resource must be able to use it alone. Test files may use internal/.
func TestDependencyFence(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if path == "github.com/leasegate/leasegate" || strings.HasPrefix(path, "github.com/leasegate/leasegate/") {
				t.Errorf("%s imports %s; fence must not depend on other leasegate packages", f, path)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("found no source files to check")
	}
}
