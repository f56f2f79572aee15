package fence_test

import (
	"context"
	"errors"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/fence"
	"github.com/leasegate/leasegate/fence/storetest"
)

func TestStaleTokenError(t *testing.T) {
	var err error = &fence.StaleTokenError{Resource: "order:42", Token: 10, Highest: 11}
	if want := `fence: stale token 10 for "order:42": highest accepted is 11`; err.Error() != want {
		t.Errorf("Error() = %q; want %q", err.Error(), want)
	}
	wrapped := errors.Join(errors.New("context"), err)
	if !errors.Is(wrapped, fence.ErrStaleToken) {
		t.Errorf("errors.Is(%v, ErrStaleToken) = false; want true", wrapped)
	}
	var se *fence.StaleTokenError
	if !errors.As(wrapped, &se) || se.Token != 10 || se.Highest != 11 {
		t.Errorf("errors.As(%v) = %+v; want Token 10, Highest 11", wrapped, se)
	}
	if errors.Is(err, fence.ErrInvalidToken) {
		t.Errorf("errors.Is(%v, ErrInvalidToken) = true; want false", err)
	}
}

func TestMemorySemantics(t *testing.T) { storetest.Semantics(t, fence.NewMemory()) }

func TestMemoryWriteRunsOnlyWhenAccepted(t *testing.T) {
	ctx := testCtx(t)
	m := fence.NewMemory()
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
	m := fence.NewMemory()
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

// TestDependencyFence keeps the fence module free of the rest of
// leasegate: a resource must be able to use it alone, so no file of the
// module, its tests included, imports a leasegate package outside it.
// (internal/modules checks the module's requirements and a consumer's
// go.sum; this test names the offending file.)
func TestDependencyFence(t *testing.T) {
	const module = "github.com/leasegate/leasegate/fence"
	checked := 0
	err := filepath.WalkDir(".", func(f string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(f, ".go") {
			return err
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range parsed.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			inModule := path == module || strings.HasPrefix(path, module+"/")
			if !inModule && (path == "github.com/leasegate/leasegate" || strings.HasPrefix(path, "github.com/leasegate/leasegate/")) {
				t.Errorf("%s imports %s; the fence module must not depend on other leasegate packages", f, path)
			}
		}
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("found no source files to check")
	}
}
