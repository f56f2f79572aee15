package modules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readmeCheckout is what README.md's consumer go.mod writes for the path of
// the checkout.
const readmeCheckout = "/path/to/leasegate"

// readmeConsumerGoMod returns the go.mod that README.md shows a program
// using the SDK from a checkout: the fenced block that starts with a module
// directive.
func readmeConsumerGoMod(t *testing.T, root string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	blocks := strings.Split(string(raw), "```")
	// Fenced blocks are the odd pieces; each begins with its info string.
	for i := 1; i < len(blocks); i += 2 {
		_, body, _ := strings.Cut(blocks[i], "\n")
		if strings.HasPrefix(body, "module ") {
			found = append(found, body)
		}
	}
	if len(found) != 1 {
		t.Fatalf("README.md has %d fenced go.mod files (a block starting with \"module \"); want the one for using the SDK from a checkout", len(found))
	}
	return found[0]
}

// readmeConsumer returns README.md's consumer go.mod for a program using
// the SDK from the checkout at root: the placeholder path replaced by root,
// after checking that it requires the SDK and replaces both the SDK and the
// generated API with their directories.
func readmeConsumer(t *testing.T, root string) string {
	t.Helper()
	gomod := readmeConsumerGoMod(t, root)
	for _, want := range []string{
		"require " + rootModule + "/client ",
		rootModule + "/client => " + readmeCheckout + "/client",
		rootModule + "/proto => " + readmeCheckout + "/proto",
	} {
		if !strings.Contains(gomod, want) {
			t.Fatalf("README.md's consumer go.mod lacks %q:\n%s", want, gomod)
		}
	}
	return strings.ReplaceAll(gomod, readmeCheckout, root)
}
