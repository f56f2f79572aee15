package k6_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// libProbe imports lib.js in node, with k6's open() stood in for by a file
// read, and prints what target, requireLoopback, bearer and authHeaders
// make of the environment in argv[2] (JSON), or the error they throw.
const libProbe = `
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const lib = process.argv[2];
globalThis.open = (p) => readFileSync(new URL(p, pathToFileURL(lib)), 'utf8');
const { target, requireLoopback, bearer, authHeaders } = await import(pathToFileURL(lib).href);
const env = JSON.parse(process.argv[3]);
try {
  const t = target(env);
  requireLoopback(t.url, t.allowRemote);
  requireLoopback(t.grpcAddr, t.allowRemote);
  const token = bearer(env, (p) => readFileSync(p, 'utf8'));
  console.log(JSON.stringify({ target: t, headers: authHeaders({ 'Content-Type': 'application/json' }, token) }));
} catch (e) {
  console.log(JSON.stringify({ error: e.message }));
}
`

// TestTargetAndCredentials runs lib.js's reading of the environment in
// node: loopback targets by default, a remote one only with
// LEASEGATE_ALLOW_REMOTE=1, and the bearer token from LEASEGATE_TOKEN or
// LEASEGATE_TOKEN_FILE.
func TestTargetAndCredentials(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: lib.js's target and credential logic is not checked")
	}
	dir := t.TempDir()
	probe := filepath.Join(dir, "probe.mjs")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(probe, []byte(libProbe), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("  from-file-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lib, err := filepath.Abs("lib.js")
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		Target struct {
			URL         string `json:"url"`
			GRPCAddr    string `json:"grpcAddr"`
			Plaintext   bool   `json:"plaintext"`
			AllowRemote bool   `json:"allowRemote"`
		} `json:"target"`
		Headers map[string]string `json:"headers"`
		Error   string            `json:"error"`
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		url     string // want, when no error
		grpc    string
		auth    string // the Authorization header, "" for none
		wantErr string
	}{
		{name: "default", env: nil, url: "http://127.0.0.1:7070", grpc: "127.0.0.1:7070"},
		{name: "trailing slash", env: map[string]string{"LEASEGATE_ENDPOINT": "http://localhost:8080/"}, url: "http://localhost:8080", grpc: "localhost:8080"},
		{name: "BASE_URL is not read", env: map[string]string{"BASE_URL": "http://localhost:8080/"}, url: "http://127.0.0.1:7070", grpc: "127.0.0.1:7070"},
		{name: "https loopback", env: map[string]string{"LEASEGATE_ENDPOINT": "https://[::1]:7443"}, url: "https://[::1]:7443", grpc: "[::1]:7443"},
		{name: "remote refused", env: map[string]string{"LEASEGATE_ENDPOINT": "https://locks.example.com"}, wantErr: "unless LEASEGATE_ALLOW_REMOTE=1"},
		{name: "remote gRPC refused", env: map[string]string{"GRPC_ADDR": "10.0.0.7:7070"}, wantErr: "refusing to load 10.0.0.7:7070"},
		{name: "remote refused with 0", env: map[string]string{"LEASEGATE_ENDPOINT": "http://10.0.0.7:7070", "LEASEGATE_ALLOW_REMOTE": "0"}, wantErr: "refusing to load"},
		{name: "remote allowed", env: map[string]string{"LEASEGATE_ENDPOINT": "https://locks.example.com", "LEASEGATE_ALLOW_REMOTE": "1"}, url: "https://locks.example.com", grpc: "locks.example.com:443"},
		{name: "bad opt-in", env: map[string]string{"LEASEGATE_ALLOW_REMOTE": "yes"}, wantErr: "LEASEGATE_ALLOW_REMOTE=yes: want 1"},
		{name: "bad endpoint", env: map[string]string{"LEASEGATE_ENDPOINT": "127.0.0.1:7070"}, wantErr: "want http://HOST[:PORT]"},
		{name: "token", env: map[string]string{"LEASEGATE_TOKEN": " tok-0123456789 "}, url: "http://127.0.0.1:7070", grpc: "127.0.0.1:7070", auth: "Bearer tok-0123456789"},
		{name: "token file", env: map[string]string{"LEASEGATE_TOKEN_FILE": tokenFile}, url: "http://127.0.0.1:7070", grpc: "127.0.0.1:7070", auth: "Bearer from-file-0123456789"},
		{name: "both tokens", env: map[string]string{"LEASEGATE_TOKEN": "a", "LEASEGATE_TOKEN_FILE": tokenFile}, wantErr: "both set"},
		{name: "token with a space", env: map[string]string{"LEASEGATE_TOKEN": "two words"}, wantErr: "whitespace"},
	} {
		if tc.env == nil {
			tc.env = map[string]string{}
		}
		env, _ := json.Marshal(tc.env)
		out, err := exec.Command(node, probe, lib, string(env)).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: node: %v\n%s", tc.name, err, out)
		}
		var got answer
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: probe printed %q: %v", tc.name, out, err)
		}
		switch {
		case tc.wantErr != "":
			if !strings.Contains(got.Error, tc.wantErr) {
				t.Errorf("%s: error %q; want one saying %q", tc.name, got.Error, tc.wantErr)
			}
		case got.Error != "":
			t.Errorf("%s: error %q; want %s", tc.name, got.Error, tc.url)
		case got.Target.URL != tc.url || got.Target.GRPCAddr != tc.grpc || got.Headers["Authorization"] != tc.auth:
			t.Errorf("%s: target %+v, Authorization %q; want %s, gRPC %s, %q", tc.name, got.Target, got.Headers["Authorization"], tc.url, tc.grpc, tc.auth)
		}
	}
}
