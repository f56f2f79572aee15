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
