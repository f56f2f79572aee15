package queue

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the longest lock name accepted, in bytes.
const MaxNameLen = 256

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
	for i, r := range name {
		if r == ' ' {
			continue
		}
		if unicode.IsControl(r) || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%w: name has a control or non-printable character %U at byte %d; allowed: printable UTF-8 and plain spaces", ErrInvalidName, r, i)
		}
	}
	return nil
}

// escapeName maps a valid name to a key segment that never contains '/', so
// the name's key prefix (segment + "/") can never be a prefix of another
// name's keys: "a", "a/b" and "a-b" stay different locks.
func escapeName(name string) string {
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if isPlain(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func isPlain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == ':' || c == '@' || c == '+' || c == '=' || c == ','
}

// unescapeName reverses escapeName.
func unescapeName(seg string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(seg) {
			return "", fmt.Errorf("%w: truncated escape in %q", ErrInvalidName, seg)
		}
		var v byte
		if _, err := fmt.Sscanf(seg[i+1:i+3], "%02X", &v); err != nil {
			return "", fmt.Errorf("%w: bad escape in %q", ErrInvalidName, seg)
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}
