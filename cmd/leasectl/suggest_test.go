package main

import (
	"io"
	"strings"
	"testing"
)

// A mistyped command is a usage error (exit 2, one line) that names the
// typed word and, when it is a typo of a command, that command; a word far
// from every command gets no suggestion. leasectl runs as a process, as a
// user meets it; no gateway is needed, since no call is made.
func TestUnknownCommandSuggestsNearest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string // the suggested command; "" for none
	}{
		{[]string{"relase", "x"}, "release"},                // a letter left out
		{[]string{"releas", "id", "1"}, "release"},          // the last letter left out
		{[]string{"relaese", "x"}, "release"},               // two letters swapped
		{[]string{"acquier", "x"}, "acquire"},               // swapped at the end
		{[]string{"aquire", "x"}, "acquire"},                // a letter left out
		{[]string{"describ", "x"}, "describe"},              //
		{[]string{"wacth", "p/"}, "watch"},                  // swapped, five letters
		{[]string{"Renew", "id", "1"}, "renew"},             // case
		{[]string{"force-relase", "x"}, "force-release"},    // in a longer name
		{[]string{"lss"}, "ls"},                             // one letter more than a short name
		{[]string{"relase", "--ttl", "5s", "x"}, "release"}, // the command's flag is unknown to the root
		{[]string{"frobnicate"}, ""},                        // far from every command
		{[]string{"rm", "x"}, ""},                           // two edits from "ls" and "run": too many for short names
		{[]string{"xy"}, ""},                                // a two-letter word is not "ls"
		{[]string{"rel", "x"}, ""},                          // a prefix is no typo
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			t.Parallel()
			r := run(t, nil, tc.args...)
			ok := r.code == exitUsage && strings.Count(r.stderr, "\n") == 1 &&
				strings.Contains(r.stderr, `unknown command "`+tc.args[0]+`"`) && !strings.Contains(r.stderr, "Usage")
			if tc.want == "" {
				ok = ok && !strings.Contains(r.stderr, "did you mean")
			} else {
				ok = ok && strings.Contains(r.stderr, `did you mean "`+tc.want+`"?`)
			}
			if !ok {
				want := "no suggestion"
				if tc.want != "" {
					want = `did you mean "` + tc.want + `"?`
				}
				t.Fatalf("leasectl %q exited %d with stderr %q; want %d and one line naming %q with %s",
					tc.args, r.code, r.stderr, exitUsage, tc.args[0], want)
			}
		})
	}
}

// A real command and a real flag still work as before: the suggestion
// replaces only the error for a name that is no command.
func TestKnownCommandsUnaffectedBySuggestion(t *testing.T) {
	t.Parallel()
	if r := run(t, nil, "--bogus"); r.code != exitUsage || !strings.Contains(r.stderr, "unknown flag: --bogus") || strings.Contains(r.stderr, "did you mean") {
		t.Fatalf("leasectl --bogus exited %d with stderr %q; want %d and the unknown flag", r.code, r.stderr, exitUsage)
	}
	root := newRootCmd(io.Discard)
	for _, c := range root.Commands() {
		if got := nearestCommand(root, c.Name()); got != c.Name() {
			t.Errorf("nearestCommand(%q) = %q; want the command itself", c.Name(), got)
		}
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"release", "release", 0},
		{"relase", "release", 1},     // deletion
		{"releasse", "release", 1},   // insertion
		{"relaase", "release", 1},    // substitution
		{"relaese", "release", 1},    // adjacent swap
		{"ca", "abc", 3},             // optimal string alignment: no edit of a swapped pair
		{"frobnicate", "release", 7}, // f deleted; "obnic" to "ele" and "t" to "s"
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tc.a, tc.b, got, tc.want)
		}
		if got := editDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}
