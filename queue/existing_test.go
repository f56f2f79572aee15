package queue

import (
	"errors"
	"testing"
)

// TestExistingFindsOnlyWhatHoldsAndWritesNothing: Existing answers the
// grant made under a request id while it holds — a lock, a re-entered hold
// — for its caller alone, and never writes: a waiting key, a released lock
// and a request id nobody used are not found, and etcd's revision does not
// move.
func TestExistingFindsOnlyWhatHoldsAndWritesNothing(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	s := mustSession(t, e)
	inSession := func(r AcquireRequest) AcquireRequest {
		r.Session, r.SessionSecret = s.Lease, s.Secret
		return r
	}
	holder := inSession(req("ex"))
	holder.Reentrant = true
	g := mustAcquire(t, e, holder)
	hold := inSession(req("ex"))
	hold.Reentrant = true
	hg := mustAcquire(t, e, hold)
	waiting := req("ex")
	w, err := e.Enqueue(ctx, waiting)
	if err != nil {
		t.Fatal(err)
	}
	defer e.removeWaiter(ctx, w.q)
	before, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what  string
		r     AcquireRequest
		found *Grant
	}{
		{"the lock", holder, &g},
		{"the re-entered hold", hold, &hg},
		{"a waiting key", waiting, nil},
		{"a request id nobody used", inSession(req("ex")), nil},
	} {
		got, found, err := e.Existing(ctx, tc.r)
		if err != nil {
			t.Fatalf("Existing(%s) = %v", tc.what, err)
		}
		switch {
		case tc.found == nil && found:
			t.Fatalf("Existing(%s) found %+v; want nothing", tc.what, got.Handle)
		case tc.found != nil && (!found || got.Handle != tc.found.Handle || got.Token() != tc.found.Token()):
			t.Fatalf("Existing(%s) = %+v, %v; want %+v", tc.what, got.Handle, found, tc.found.Handle)
		}
	}
	other := holder
	other.ClientID = "someone else"
	if _, _, err := e.Existing(ctx, other); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Existing by another caller = %v; want ErrNotOwner", err)
	}
	after, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.Revision != before.Header.Revision {
		t.Fatalf("etcd's revision moved from %d to %d: Existing wrote", before.Header.Revision, after.Header.Revision)
	}
	mustRelease(t, e, hg)
	if _, found, err := e.Existing(ctx, hold); err != nil || found {
		t.Fatalf("Existing of a released hold = %v, %v; want not found", found, err)
	}
}
