package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// unknownCommand is the usage error for a first argument that names no
// command of root, with the nearest command's name when one is close
// enough to be a typo of it.
func unknownCommand(root *cobra.Command, typed string) error {
	if near := nearestCommand(root, typed); near != "" {
		return usagef("unknown command %q; did you mean %q? (see leasectl --help)", typed, near)
	}
	return usagef("unknown command %q; see leasectl --help", typed)
}

// nearestCommand returns the name of root's subcommand whose name or alias
// is nearest to typed in edit distance (case-insensitive), or "" when none
// is close enough. Close enough is at most one edit for a name of up to
// five letters and two for a longer one, so a slip of the fingers on
// "release" is caught while a different word ("frobnicate") matches
// nothing, and a two-letter name ("ls") is not offered for every other
// two-letter word. Ties go to the command listed first (cobra lists them
// by name). Hidden and deprecated commands are never offered.
func nearestCommand(root *cobra.Command, typed string) string {
	typed = strings.ToLower(typed)
	best, bestDist := "", -1
	for _, c := range root.Commands() {
		if !c.IsAvailableCommand() && c.Name() != "help" {
			continue
		}
		for _, name := range append([]string{c.Name()}, c.Aliases...) {
			d := editDistance(typed, strings.ToLower(name))
			if d > maxTypo(name) {
				continue
			}
			if bestDist < 0 || d < bestDist {
				best, bestDist = c.Name(), d
			}
		}
	}
	return best
}

// maxTypo is the largest edit distance from name still taken as a typo of
// it.
func maxTypo(name string) int {
	if len(name) <= 5 {
		return 1
	}
	return 2
}

// editDistance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and swaps of two
// adjacent characters that turn a into b, each character edited at most
// once. It counts bytes, which is exact for the ASCII names commands have.
func editDistance(a, b string) int {
	// rows[i][j] is the distance between a[:i] and b[:j]; only the last
	// three rows are needed.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
