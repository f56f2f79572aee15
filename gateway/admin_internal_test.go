package gateway

import (
	"os"
	"slices"
	"testing"
)

func TestLoopbackPeer(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000": true, "[::1]:5000": true, "127.9.9.9:1": true, "[::ffff:127.0.0.1]:80": true,
		"10.0.0.1:5000": false, "[2001:db8::1]:443": false, "": false, "localhost:80": false,
	} {
		if got := loopbackPeer(addr); got != want {
			t.Errorf("loopbackPeer(%q) = %v; want %v", addr, got, want)
		}
	}
}

func TestRolesClaim(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want []string
	}{
		{"admin reader", []string{"admin", "reader"}},
		{[]any{"admin", 3, ""}, []string{"admin"}},
		{nil, nil}, {42, nil},
	} {
		if got := rolesClaim(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("rolesClaim(%v) = %v; want %v", tc.in, got, tc.want)
		}
	}
}

func TestTokensFileRoles(t *testing.T) {
	path := t.TempDir() + "/tokens"
	if err := os.WriteFile(path, []byte("tok-0123456789abcdef t1 ops admin,reader\ntok-abcdef0123456789 t1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := loadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	var admins, plain int
	for _, id := range toks {
		if id.HasRole(RoleAdmin) && id.HasRole("reader") && id.Subject == "ops" {
			admins++
		} else if len(id.Roles) == 0 && id.Subject == "t1" {
			plain++
		}
	}
	if admins != 1 || plain != 1 {
		t.Fatalf("tokens %v", toks)
	}
	if err := os.WriteFile(path, []byte("tok-0123456789abcdef t1 ops admin,,x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTokens(path); err == nil {
		t.Fatal("an empty role was accepted")
	}
}
