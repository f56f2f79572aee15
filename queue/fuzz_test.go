package queue

import (
	"errors"
	"strings"
	"testing"
)

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "a-b", "a%2Fb", "process_order:42", "", " x", "x\x00y", "ä/ö", strings.Repeat("n", 257), "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateName(name)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ValidateName(%q) = %v; want an ErrInvalidName", name, err)
			}
			return
		}
		seg := escapeName(name)
		if strings.Contains(seg, "/") {
			t.Fatalf("escapeName(%q) = %q contains '/': names could collide by prefix", name, seg)
		}
		back, err := unescapeName(seg)
		if err != nil || back != name {
			t.Fatalf("unescapeName(escapeName(%q)) = %q, %v", name, back, err)
		}
	})
}
