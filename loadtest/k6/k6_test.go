package k6_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts are the k6 scripts; lib.js is their shared module.
var scripts = []string{"rest.js", "connect.js", "grpc_stream.js", "lib.js"}

// TestScriptsParse checks every script's syntax with node (as ES modules,
// see package.json): k6 itself cannot be installed here.
func TestScriptsParse(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the k6 scripts' syntax is not checked (install Node.js to check it)")
	}
	for _, s := range scripts {
		out, err := exec.Command(node, "--check", s).CombinedOutput()
		if err != nil {
			t.Errorf("node --check %s: %v\n%s", s, err, out)
		}
	}
}

// TestScriptsSendTheShapes checks that each script builds its requests from
// shapes.json, the file the replay tests replay: otherwise the replay would
// prove nothing about what k6 sends.
func TestScriptsSendTheShapes(t *testing.T) {
	for _, c := range []struct{ script, uses string }{
		{"rest.js", "shapes.rest"},
		{"connect.js", "shapes.connect"},
		{"grpc_stream.js", "shapes.grpc.acquire"},
		{"grpc_stream.js", "shapes.grpc.release"},
		{"lib.js", "open('./shapes.json')"},
	} {
		b, err := os.ReadFile(c.script)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), c.uses) {
			t.Errorf("%s does not use %s", c.script, c.uses)
		}
	}
	for _, s := range scripts[:3] {
		b, _ := os.ReadFile(s)
		for _, use := range []string{"target(__ENV)", "requireLoopback(", "TARGET.allowRemote", "bearer(__ENV, open)", "clientCert(__ENV, open)"} {
			if !strings.Contains(string(b), use) {
				t.Errorf("%s does not use %s: it must take its target and credentials from lib.js (TestTargetAndCredentials)", s, use)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(".", "README.md")); err != nil {
		t.Errorf("README.md: %v", err)
	}
}
