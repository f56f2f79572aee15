package fence

import "testing"

func TestEtcdTokenKeyLayout(t *testing.T) {
	for _, tc := range []struct{ prefix, resource, want string }{
		{"", "order:42", "fence/order:42/token"},
		{"/app/", "a/b", "/app/a/b/token"},
		{"/app", "a", "/app/a/token"},
	} {
		if got := NewEtcdGuard(nil, tc.prefix).TokenKey(tc.resource); got != tc.want {
			t.Errorf("NewEtcdGuard(%q).TokenKey(%q) = %q; want %q", tc.prefix, tc.resource, got, tc.want)
		}
	}
	for _, tok := range []int64{0, 9, 10, 1 << 48, 1<<63 - 1} {
		enc := encodeToken(tok)
		if got, err := decodeToken("k", []byte(enc)); err != nil || got != tok || len(enc) != tokenWidth {
			t.Errorf("decodeToken(encodeToken(%d) = %q) = %d, %v; want %d", tok, enc, got, err, tok)
		}
	}
	for _, bad := range []string{"11", "-0000000000000000001", "0000000000000000000x", "000000000000000000000"} {
		if _, err := decodeToken("k", []byte(bad)); err == nil {
			t.Errorf("decodeToken(%q) = nil error; want an error", bad)
		}
	}
}
