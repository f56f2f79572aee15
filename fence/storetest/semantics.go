package storetest

import (
	"errors"
	"strconv"
	"testing"

	"github.com/leasegate/leasegate/fence"
)

// Semantics checks the contract every Store meets, on a store that holds no
// token yet for the resources "order:42", "order:43", "big" and "neg":
// a token passes if it is at least the highest accepted one (equal tokens
// pass), numeric order holds up to the largest int64, keys are independent,
// a refusal is a *fence.StaleTokenError naming both tokens, and an empty
// resource or a negative token is refused without being recorded.
func Semantics(t *testing.T, s fence.Store) {
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
			var se *fence.StaleTokenError
			if !errors.Is(err, fence.ErrStaleToken) || !errors.As(err, &se) {
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
	if err := s.Accept(ctx, "big", maxToken-1); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("Accept(big, max-1) after max = %v; want fence.ErrStaleToken", err)
	}
	if err := s.Accept(ctx, "", 1); !errors.Is(err, fence.ErrEmptyResource) {
		t.Errorf(`Accept("", 1) = %v; want fence.ErrEmptyResource`, err)
	}
	if err := s.Accept(ctx, "neg", -1); !errors.Is(err, fence.ErrInvalidToken) {
		t.Errorf("Accept(neg, -1) = %v; want fence.ErrInvalidToken", err)
	}
	if _, ok, err := s.Highest(ctx, "neg"); err != nil || ok {
		t.Errorf("Highest(neg) after a refused -1 = _, %v, %v; want false, nil", ok, err)
	}
}
