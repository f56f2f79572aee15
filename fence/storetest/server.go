package storetest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leasegate/leasegate/fence"
)

// Server is a real HTTP server on loopback whose handler sits behind
// fence.Middleware over a Store and answers "<lock name>=<token>", from what
// the middleware put in the request's context.
type Server struct {
	url   string
	calls atomic.Int64 // handler invocations
}

// NewServer starts a Server fencing with store and closes it at the end of
// the test.
func NewServer(t *testing.T, store fence.Store) *Server {
	t.Helper()
	s := &Server{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		tok, okT := fence.TokenFromContext(r.Context())
		name, okN := fence.LockNameFromContext(r.Context())
		if !okT || !okN {
			http.Error(w, "no fence in context", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%s=%d", name, tok)
	})
	srv := httptest.NewServer(fence.Middleware(store, h))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// Calls is the number of requests the middleware let through to the handler.
func (s *Server) Calls() int64 { return s.calls.Load() }

// Do sends a PUT with a fence.HeaderLockName of lockName and one
// fence.HeaderToken per token, an empty value omitting the header, and
// returns the response's status and body. It blocks for the round trip.
func (s *Server) Do(t *testing.T, lockName string, tokens ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPut, s.url+"/orders/42", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if lockName != "" {
		req.Header.Set(fence.HeaderLockName, lockName)
	}
	for _, tok := range tokens {
		if tok != "" {
			req.Header.Add(fence.HeaderToken, tok)
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
