package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/gwtest"
)

// The address the client examples of docs/security.md use; the test
// puts a real gateway's in its place.
const (
	docURL  = "https://locks.internal:7443"
	docAddr = "locks.internal:7443"
)

// docBlock matches a shell block marked for this test.
var docBlock = regexp.MustCompile("(?s)<!-- docs-test: ([a-z]+) -->\n```sh\n(.*?)```")

// TestSecurityDocExamples runs the shell examples of docs/security.md's
// client section, each block against a gateway configured as it says —
// static tokens, JWT or mTLS, all over TLS with a private CA — in a
// directory holding the files the examples name (token, ca.pem,
// client.pem, client.key). A line whose tool is not installed (k6,
// grpcurl) is skipped and logged; every other line must succeed.
func TestSecurityDocExamples(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := docBlock.FindAllStringSubmatch(string(doc), -1)
	seen := map[string]bool{}
	for _, b := range blocks {
		kind, script := b[1], b[2]
		seen[kind] = true
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pki := gwtest.NewPKI(t)
			copyFile(t, pki.CAFile, filepath.Join(dir, "ca.pem"))
			var g *gateway
			switch kind {
			case "tokens":
				const token = "docs-token-0123456789abcdef"
				g = gwtest.Start(t, shared, gwtest.TLS(pki, false), gwtest.Tokens(token+" acme docs"))
				writeTo(t, filepath.Join(dir, "token"), token+"\n")
			case "jwt":
				iss := gwtest.NewJWTIssuer(t)
				g = gwtest.Start(t, shared, gwtest.TLS(pki, false), gwtest.JWTAuth(iss))
				writeTo(t, filepath.Join(dir, "token"), iss.Sign(t, "acme", "docs", time.Hour)+"\n")
			case "mtls":
				g = gwtest.Start(t, shared, gwtest.TLS(pki, true))
				cert, key := pki.ClientCert(t, "acme", "docs")
				copyFile(t, cert, filepath.Join(dir, "client.pem"))
				copyFile(t, key, filepath.Join(dir, "client.key"))
			default:
				t.Fatalf("docs/security.md marks a block %q; this test knows tokens, jwt and mtls", kind)
			}
			script = strings.ReplaceAll(strings.ReplaceAll(script, docURL, g.URL), docAddr, g.Addr)
			kept := []string{"set -ex"}
			for _, line := range logicalLines(script) {
				tool := commandOf(line)
				if _, err := exec.LookPath(tool); err != nil && tool != "leasectl" && tool != "export" {
					t.Logf("skipped, %s is not installed: %s", tool, line)
					continue
				}
				kept = append(kept, line)
			}
			cmd := exec.CommandContext(ctxT(t), "sh", "-c", strings.Join(kept, "\n"))
			cmd.Dir = dir
			cmd.Env = append(cleanEnv(), "PATH="+filepath.Dir(leasectl)+string(os.PathListSeparator)+os.Getenv("PATH"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the %s examples of docs/security.md failed: %v\n%s", kind, err, out)
			}
		})
	}
	for _, kind := range []string{"tokens", "jwt", "mtls"} {
		if !seen[kind] {
			t.Errorf("docs/security.md has no block marked docs-test: %s", kind)
		}
	}
}

// logicalLines are a shell block's commands: continuation lines joined,
// blank lines and comments dropped.
func logicalLines(script string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(script, "\n") {
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		l = strings.TrimSpace(cur + l)
		cur = ""
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// commandOf is the command a shell line runs, past its VAR=value
// assignments.
func commandOf(line string) string {
	return shellCommand.FindStringSubmatch(line)[1]
}

var shellCommand = regexp.MustCompile(`^(?:\w+=(?:"[^"]*"|'[^']*'|\S*)\s+)*(\S*)`)

func writeTo(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeTo(t, to, string(b))
}
