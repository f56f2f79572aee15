package fence_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/leasegate/leasegate/fence"
	"github.com/leasegate/leasegate/fence/storetest"
)

func TestMiddlewareDance(t *testing.T) {
	ctx := testCtx(t)
	mem := fence.NewMemory()
	srv := storetest.NewServer(t, mem)

	if code, body := srv.Do(t, "order:42", "10"); code != 200 || body != "order:42=10" {
		t.Fatalf("first token 10: %d %q; want 200 %q", code, body, "order:42=10")
	}
	if code, body := srv.Do(t, "order:42", "11"); code != 200 || body != "order:42=11" {
		t.Fatalf("newer token 11: %d %q; want 200 %q", code, body, "order:42=11")
	}
	if h, _, _ := mem.Highest(ctx, "order:42"); h != 11 {
		t.Fatalf("highest after token 11 = %d; want 11 recorded", h)
	}
	calls := srv.Calls()
	code, body := srv.Do(t, "order:42", "10")
	if code != http.StatusConflict {
		t.Fatalf("stale token 10: status %d %q; want 409", code, body)
	}
	if want := `{"error":"stale_token","token":"10","highest":"11","lockName":"order:42"}` + "\n"; body != want {
		t.Errorf("stale body %q; want %q", body, want)
	}
	if srv.Calls() != calls {
		t.Errorf("handler ran for a stale request")
	}
	if code, body := srv.Do(t, "order:42", "11"); code != 200 || body != "order:42=11" {
		t.Errorf("equal token 11: %d %q; want 200", code, body)
	}
	// Lock names are fenced independently.
	if code, _ := srv.Do(t, "order:43", "1"); code != 200 {
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
	mem := fence.NewMemory()
	if err := mem.Accept(testCtx(t), "order:42", highest); err != nil {
		t.Fatal(err)
	}
	srv := storetest.NewServer(t, mem)
	code, body := srv.Do(t, "order:42", strconv.FormatInt(token, 10))
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
		text.Error != fence.CodeStaleToken || text.LockName != "order:42" {
		t.Errorf("409 body %q read as %+v; want token %d and highest %d as decimal strings", body, text, token, highest)
	}
	// Go clients: StaleBody itself decodes the strings.
	var sb fence.StaleBody
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
	srv := storetest.NewServer(t, fence.NewMemory())
	for _, tc := range []struct {
		name     string
		lockName string
		tokens   []string
		code     string
	}{
		{"no headers", "", nil, fence.CodeMissingLockName},
		{"no lock name", "", []string{"5"}, fence.CodeMissingLockName},
		{"no token", "order:42", nil, fence.CodeMissingToken},
		{"word", "order:42", []string{"abc"}, fence.CodeInvalidToken},
		{"negative", "order:42", []string{"-1"}, fence.CodeInvalidToken},
		{"fraction", "order:42", []string{"1.5"}, fence.CodeInvalidToken},
		{"plus sign", "order:42", []string{"+5"}, fence.CodeInvalidToken},
		{"overflow", "order:42", []string{"9223372036854775808"}, fence.CodeInvalidToken},
		{"long zeros", "order:42", []string{"00000000000000000001"}, fence.CodeInvalidToken},
		{"hex", "order:42", []string{"0x10"}, fence.CodeInvalidToken},
		{"empty", "order:42", []string{" "}, fence.CodeInvalidToken},
		{"two tokens", "order:42", []string{"5", "6"}, fence.CodeInvalidToken},
	} {
		code, body := srv.Do(t, tc.lockName, tc.tokens...)
		var got fence.ErrorBody
		if err := json.Unmarshal([]byte(body), &got); err != nil || code != 400 || got.Error != tc.code || got.Message == "" {
			t.Errorf("%s: %d %q; want 400 with error %q and a message", tc.name, code, body, tc.code)
		}
	}
	if n := srv.Calls(); n != 0 {
		t.Errorf("handler ran %d times for bad requests; want 0", n)
	}
	// The largest token is well-formed.
	if code, _ := srv.Do(t, "big", "9223372036854775807"); code != 200 {
		t.Errorf("token MaxInt64: status %d; want 200", code)
	}
}

func TestContextOutsideMiddleware(t *testing.T) {
	if tok, ok := fence.TokenFromContext(t.Context()); ok || tok != 0 {
		t.Errorf("TokenFromContext(plain) = %d, %v; want 0, false", tok, ok)
	}
	if name, ok := fence.LockNameFromContext(t.Context()); ok || name != "" {
		t.Errorf("LockNameFromContext(plain) = %q, %v; want \"\", false", name, ok)
	}
}
