package fence

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// fencedServer is a real HTTP server whose handler sits behind Middleware
// and echoes what the middleware put in the request's context.
type fencedServer struct {
	url   string
	calls atomic.Int64 // handler invocations
}

func newFencedServer(t *testing.T, store Store) *fencedServer {
	t.Helper()
	s := &fencedServer{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		tok, okT := TokenFromContext(r.Context())
		name, okN := LockNameFromContext(r.Context())
		if !okT || !okN {
			http.Error(w, "no fence in context", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%s=%d", name, tok)
	})
	srv := httptest.NewServer(Middleware(store, h))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// do sends a PUT with the given headers; an empty value omits the header.
func (s *fencedServer) do(t *testing.T, lockName string, tokens ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPut, s.url+"/orders/42", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if lockName != "" {
		req.Header.Set(HeaderLockName, lockName)
	}
	for _, tok := range tokens {
		if tok != "" {
			req.Header.Add(HeaderToken, tok)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestMiddlewareDance(t *testing.T) {
	ctx := testCtx(t)
	mem := NewMemory()
	srv := newFencedServer(t, mem)

	if code, body := srv.do(t, "order:42", "10"); code != 200 || body != "order:42=10" {
		t.Fatalf("first token 10: %d %q; want 200 %q", code, body, "order:42=10")
	}
	if code, body := srv.do(t, "order:42", "11"); code != 200 || body != "order:42=11" {
		t.Fatalf("newer token 11: %d %q; want 200 %q", code, body, "order:42=11")
	}
	if h, _, _ := mem.Highest(ctx, "order:42"); h != 11 {
		t.Fatalf("highest after token 11 = %d; want 11 recorded", h)
	}
	calls := srv.calls.Load()
	code, body := srv.do(t, "order:42", "10")
	if code != http.StatusConflict {
		t.Fatalf("stale token 10: status %d %q; want 409", code, body)
	}
	if want := `{"error":"stale_token","token":"10","highest":"11","lockName":"order:42"}` + "\n"; body != want {
		t.Errorf("stale body %q; want %q", body, want)
	}
	if srv.calls.Load() != calls {
		t.Errorf("handler ran for a stale request")
	}
	if code, body := srv.do(t, "order:42", "11"); code != 200 || body != "order:42=11" {
		t.Errorf("equal token 11: %d %q; want 200", code, body)
	}
	// Lock names are fenced independently.
	if code, _ := srv.do(t, "order:43", "1"); code != 200 {
		t.Errorf("token 1 on another lock name: status %d; want 200", code)
	}
	if h, _, _ := mem.Highest(ctx, "order:42"); h != 11 {
		t.Errorf("highest after the dance = %d; want 11", h)
	}
}

// TestStaleBodyTokensPast2To53 sends a token of epoch 40, well above 2^53,
// and reads the 409 body the way a client in any language can: the tokens
// come back exactly, as strings. It also shows why: the same tokens as JSON
// numbers, read as doubles (what JavaScript does), lose their low bits; here
// the refused token even reads as equal to the highest.
func TestStaleBodyTokensPast2To53(t *testing.T) {
	const epoch40 = int64(40) << 48 // token = epoch<<48 | revision
	token, highest := epoch40|3, epoch40|4
	if token <= 1<<53 {
		t.Fatalf("token %d is not above 2^53; the test would prove nothing", token)
	}
	mem := NewMemory()
	if err := mem.Accept(testCtx(t), "order:42", highest); err != nil {
		t.Fatal(err)
	}
	srv := newFencedServer(t, mem)
	code, body := srv.do(t, "order:42", strconv.FormatInt(token, 10))
	if code != http.StatusConflict {
		t.Fatalf("stale token %d: status %d %q; want 409", token, code, body)
	}

	// Any client: string fields, parsed as 64-bit integers.
	var text struct {
		Error, Token, Highest, LockName string
	}
	if err := json.Unmarshal([]byte(body), &text); err != nil {
		t.Fatalf("decode %q into string fields: %v", body, err)
	}
	if text.Token != strconv.FormatInt(token, 10) || text.Highest != strconv.FormatInt(highest, 10) ||
		text.Error != CodeStaleToken || text.LockName != "order:42" {
		t.Errorf("409 body %q read as %+v; want token %d and highest %d as decimal strings", body, text, token, highest)
	}
	// Go clients: StaleBody itself decodes the strings.
	var sb StaleBody
	if err := json.Unmarshal([]byte(body), &sb); err != nil || sb.Token != token || sb.Highest != highest {
		t.Errorf("decode %q into StaleBody = %+v, %v; want Token %d, Highest %d", body, sb, err, token, highest)
	}

	// The former body carried JSON numbers; read as doubles they round.
	old, err := json.Marshal(struct {
		Token   int64 `json:"token"`
		Highest int64 `json:"highest"`
	}{token, highest})
	if err != nil {
		t.Fatal(err)
	}
	var asDoubles struct{ Token, Highest float64 }
	if err := json.Unmarshal(old, &asDoubles); err != nil {
		t.Fatal(err)
	}
	if int64(asDoubles.Token) == token || asDoubles.Token != asDoubles.Highest {
		t.Errorf("number body %s read as doubles: token %.0f, highest %.0f; want the refused token rounded onto the highest", old, asDoubles.Token, asDoubles.Highest)
	}
}

func TestMiddlewareRejectsBadHeaders(t *testing.T) {
	srv := newFencedServer(t, NewMemory())
	for _, tc := range []struct {
		name     string
		lockName string
		tokens   []string
		code     string
	}{
		{"no headers", "", nil, CodeMissingLockName},
		{"no lock name", "", []string{"5"}, CodeMissingLockName},
		{"no token", "order:42", nil, CodeMissingToken},
		{"word", "order:42", []string{"abc"}, CodeInvalidToken},
		{"negative", "order:42", []string{"-1"}, CodeInvalidToken},
		{"fraction", "order:42", []string{"1.5"}, CodeInvalidToken},
		{"plus sign", "order:42", []string{"+5"}, CodeInvalidToken},
		{"overflow", "order:42", []string{"9223372036854775808"}, CodeInvalidToken},
		{"long zeros", "order:42", []string{"00000000000000000001"}, CodeInvalidToken},
		{"hex", "order:42", []string{"0x10"}, CodeInvalidToken},
		{"empty", "order:42", []string{" "}, CodeInvalidToken},
		{"two tokens", "order:42", []string{"5", "6"}, CodeInvalidToken},
	} {
		code, body := srv.do(t, tc.lockName, tc.tokens...)
		var got ErrorBody
		if err := json.Unmarshal([]byte(body), &got); err != nil || code != 400 || got.Error != tc.code || got.Message == "" {
			t.Errorf("%s: %d %q; want 400 with error %q and a message", tc.name, code, body, tc.code)
		}
	}
	if n := srv.calls.Load(); n != 0 {
		t.Errorf("handler ran %d times for bad requests; want 0", n)
	}
	// The largest token is well-formed.
	if code, _ := srv.do(t, "big", "9223372036854775807"); code != 200 {
		t.Errorf("token MaxInt64: status %d; want 200", code)
	}
}

// TestMiddlewareStoreDown uses a real SQL guard whose database is closed: the
// request fails with 503 and the cause stays private.
func TestMiddlewareStoreDown(t *testing.T) {
	db := openSQLite(t, 1)
	g, err := NewSQLGuard(testCtx(t), db, SQLConfig{Dialect: SQLite})
	if err != nil {
		t.Fatal(err)
	}
	srv := newFencedServer(t, g)
	if code, _ := srv.do(t, "order:42", "1"); code != 200 {
		t.Fatalf("status %d with the store up; want 200", code)
	}
	db.Close()
	code, body := srv.do(t, "order:42", "2")
	var got ErrorBody
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != 503 || got.Error != CodeUnavailable || strings.Contains(body, "closed") {
		t.Errorf("store down: %d %q; want 503 %q without the cause", code, body, CodeUnavailable)
	}
	if n := srv.calls.Load(); n != 1 {
		t.Errorf("handler ran %d times; want 1 (not for the failed request)", n)
	}
}

func TestContextOutsideMiddleware(t *testing.T) {
	if tok, ok := TokenFromContext(t.Context()); ok || tok != 0 {
		t.Errorf("TokenFromContext(plain) = %d, %v; want 0, false", tok, ok)
	}
	if name, ok := LockNameFromContext(t.Context()); ok || name != "" {
		t.Errorf("LockNameFromContext(plain) = %q, %v; want \"\", false", name, ok)
	}
}
