// Package depfence lists what a package links, for the tests that keep
// leasegate's binaries to their dependency fences (cmd/leasegate,
// cmd/leasectl).
package depfence

import (
	"os/exec"
	"strings"
	"testing"
)

// Graph is the packages a package links, each with the packages that
// import it.
type Graph struct {
	// Packages lists every package linked, the root included.
	Packages []string
	// Importers maps a package to the linked packages that import it.
	Importers map[string][]string
}

// Deps runs `go list -deps` on pkg (a pattern relative to the test's
// directory, such as ".") and returns what it links; it fails t when the
// go command does.
func Deps(t testing.TB, pkg string) Graph {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	g := Graph{Importers: map[string][]string{}}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		p, imports, _ := strings.Cut(line, ":")
		g.Packages = append(g.Packages, p)
		for _, imp := range strings.Fields(imports) {
			g.Importers[imp] = append(g.Importers[imp], p)
		}
	}
	return g
}

// Under reports whether pkg is tree (a package path, optionally ending in
// "/") or a package below it.
func Under(pkg, tree string) bool {
	root := strings.TrimSuffix(tree, "/")
	return pkg == root || strings.HasPrefix(pkg, root+"/")
}

// ImportedBy names the importers of pkg in g, for an error message.
func (g Graph) ImportedBy(pkg string) string { return strings.Join(g.Importers[pkg], ", ") }
