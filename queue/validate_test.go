package queue

import (
	"errors"
	"strings"
	"testing"
)

// Client ids and force-release reasons are shown on operators'
// terminals: each is refused, naming itself, when it holds anything a
// terminal could take for something other than text; printable text in
// any script, with plain spaces, passes.
func TestStoredTextIsPrintable(t *testing.T) {
	bad := []string{"a\nb", "\x1b[2J", "\r", "\t", "\x00", "\x7f", "\u0085", "\u009b31m", "\u202e", "\u200b", "\u00a0", "\xff", "\ufffd"}
	good := []string{"worker 7", "host-1:4242", "ワーカー", "naïve/ü", "emoji 🙂"}
	for _, s := range bad {
		if err := ValidateClientID(s); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "client id") {
			t.Errorf("ValidateClientID(%q) = %v; want ErrInvalidArgument naming the client id", s, err)
		}
		if err := validateReason("why " + s); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "reason") {
			t.Errorf("validateReason(%q) = %v; want ErrInvalidArgument naming the reason", s, err)
		}
	}
	for _, s := range append(good, "") {
		if err := ValidateClientID(s); err != nil {
			t.Errorf("ValidateClientID(%q) = %v; want nil", s, err)
		}
	}
	for _, s := range good {
		if err := validateReason(s); err != nil {
			t.Errorf("validateReason(%q) = %v; want nil", s, err)
		}
	}
}

// Every field the engine refuses is named in its error, in the engine's
// vocabulary, beside the sentinel that classifies it.
func TestAcquireErrorsNameTheirField(t *testing.T) {
	for _, tc := range []struct {
		field string
		want  error
		bad   func(r *AcquireRequest)
	}{
		{"Name", ErrInvalidName, func(r *AcquireRequest) { r.Name = "" }},
		{"Value", ErrInvalidArgument, func(r *AcquireRequest) { r.Value = []byte("v") }},
		{"ClientID", ErrInvalidArgument, func(r *AcquireRequest) { r.ClientID = "a\nb" }},
		{"RequestID", ErrInvalidArgument, func(r *AcquireRequest) { r.RequestID = "" }},
		{"Epoch", ErrInvalidArgument, func(r *AcquireRequest) { r.Epoch = MaxEpoch + 1 }},
		{"Limit", ErrInvalidArgument, func(r *AcquireRequest) { r.Limit = MaxLimit + 1 }},
		{"LockDelay", ErrInvalidArgument, func(r *AcquireRequest) { r.LockDelay = -1 }},
		{"Reentrant", ErrInvalidArgument, func(r *AcquireRequest) { r.Reentrant = true }},
		{"TTL", ErrInvalidTTL, func(r *AcquireRequest) { r.TTL = 0 }},
	} {
		r := req("fields")
		tc.bad(&r)
		_, err := r.validate(DefaultConfig())
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, tc.want) {
			t.Errorf("a bad %s: validate = %v; want a FieldError of %s wrapping %v", tc.field, err, tc.field, tc.want)
		}
		// Validate, a router's check before it routes, refuses the same
		// but for the TTL, whose range is the engine's Config.
		verr := r.Validate(false)
		if tc.field == "TTL" {
			if verr != nil {
				t.Errorf("a bad %s: Validate = %v; want nil", tc.field, verr)
			}
		} else if !errors.As(verr, &fe) || fe.Field != tc.field || verr.Error() != err.Error() {
			t.Errorf("a bad %s: Validate = %v; want validate's %v", tc.field, verr, err)
		}
	}
	good := req("fields")
	if _, err := good.validate(DefaultConfig()); err != nil {
		t.Errorf("a good request: validate = %v", err)
	}
	good.Reentrant = true
	if err := good.Validate(true); err != nil {
		t.Errorf("a reentrant request that will ride on a session: Validate = %v", err)
	}
}

// Resume validates a request once it has a waiter to take over, and not
// before: with none, the Enqueue that follows validates it.
func TestResumeValidatesWhatItTakesOver(t *testing.T) {
	e, _ := newEngine(t)
	r := req("resume")
	r.LockDelay = MaxLockDelay + 1
	if w, err := e.Resume(testCtx(t), r); w != nil || err != nil {
		t.Fatalf("Resume of a bad request with no waiter = %v, %v; want nil, nil (Enqueue validates it)", w, err)
	}
	w, err := e.Enqueue(testCtx(t), r)
	var fe *FieldError
	if w != nil || !errors.As(err, &fe) || fe.Field != "LockDelay" {
		t.Fatalf("Enqueue of the bad request = %v, %v; want a FieldError of LockDelay", w, err)
	}
	r.LockDelay = 0
	g := mustAcquire(t, e, r)
	defer mustRelease(t, e, g)
	r.LockDelay = MaxLockDelay + 1
	if w, err := e.Resume(testCtx(t), r); w != nil || !errors.As(err, &fe) || fe.Field != "LockDelay" {
		t.Fatalf("Resume of a bad request with a waiter = %v, %v; want a FieldError of LockDelay", w, err)
	}
}
