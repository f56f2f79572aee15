package queue

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	leasegatev1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// Limits on what callers name and identify themselves with: the API's
// (leasegate.v1), which the SDK checks too.
const (
	// MaxNameLen is the longest lock name accepted, in bytes.
	MaxNameLen = leasegatev1.MaxNameBytes
	// MaxIDLen is the longest client id or request id accepted, in bytes.
	MaxIDLen = leasegatev1.MaxIDBytes
)

// ValidateName is the one rule for lock names: 1 to MaxNameLen bytes of
// valid UTF-8 with no control characters (NUL, newlines, DEL …) and no
// whitespace other than a plain space, not beginning or ending with a space.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: name is empty; want 1 to %d bytes of printable UTF-8", ErrInvalidName, MaxNameLen)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: name is %d bytes; the limit is %d", ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: name is not valid UTF-8", ErrInvalidName)
	case name[0] == ' ' || name[len(name)-1] == ' ':
		return fmt.Errorf("%w: name begins or ends with a space", ErrInvalidName)
	}
	if i, r := firstUnprintable(name); i >= 0 {
		return fmt.Errorf("%w: name has a control or non-printable character %U at byte %d; allowed: printable UTF-8 and plain spaces", ErrInvalidName, r, i)
	}
	return nil
}

// firstUnprintable returns the byte index and the rune of the first
// character of s that a terminal could take for something other than
// text, or -1: anything but letters, marks, numbers, punctuation, symbols
// and the plain space (unicode.IsPrint) — control characters (newlines,
// ESC, C1 controls), other spaces, format characters such as bidi
// overrides, and invalid UTF-8 (utf8.RuneError, and so U+FFFD, which
// stands for it). It is the one rule for every text a caller stores that
// operators read on a terminal: names, client ids and force-release reasons.
func firstUnprintable(s string) (int, rune) {
	for i, r := range s {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			return i, r
		}
	}
	return -1, 0
}

// ValidateClientID checks a caller's self-reported identity: at most
// MaxIDLen bytes of printable UTF-8 (firstUnprintable), since it is shown
// to operators (ListLocks, DescribeQueue, Watch, the audit); empty is
// allowed.
func ValidateClientID(clientID string) error {
	if len(clientID) > MaxIDLen {
		return fmt.Errorf("%w: client id is %d bytes; the limit is %d", ErrInvalidArgument, len(clientID), MaxIDLen)
	}
	if i, r := firstUnprintable(clientID); i >= 0 {
		return fmt.Errorf("%w: client id has a control or non-printable character %U at byte %d; allowed: printable UTF-8 and plain spaces", ErrInvalidArgument, r, i)
	}
	return nil
}

// ValidateRequestID checks an idempotency key: 1 to MaxIDLen bytes.
func ValidateRequestID(requestID string) error {
	switch {
	case requestID == "":
		return fmt.Errorf("%w: request id is empty", ErrInvalidArgument)
	case len(requestID) > MaxIDLen:
		return fmt.Errorf("%w: request id is %d bytes; the limit is %d", ErrInvalidArgument, len(requestID), MaxIDLen)
	}
	return nil
}
