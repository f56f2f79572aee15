package gateway

import (
	"fmt"
	"net/http"
)

// GuardDebug wraps an operator's debugging handler (the profiler, on a
// listener of its own) in the gateway's rules for who may reach it. A
// profile covers the whole process, every tenant's work in it, so it is
// the process operator's, never a tenant's — not even a tenant admin's:
//
//   - requireToken false (a loopback listener): only the local operator
//     (localOperator: a loopback peer, a loopback Host, no other site's
//     page) is served, so a web page in the operator's browser — one whose
//     DNS name rebinds to 127.0.0.1, or one that loads a profile's URL as
//     an image — cannot start profiles.
//   - requireToken true (any other listener): every request must carry a
//     bearer token the gateway accepts — a line of the tokens file or a
//     JWT it verifies — in its Authorization header (401 otherwise), and
//     the token must grant RoleOperator (403 otherwise; RoleAdmin is not
//     enough). Client certificates alone do not pass: the debug listener
//     does not ask for them.
func (s *Service) GuardDebug(h http.Handler, requireToken bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !requireToken {
			if err := localOperator(r); err != nil {
				http.Error(w, fmt.Sprintf("this listener serves the local operator only, and this request is not theirs: %v", err), http.StatusForbidden)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "send a bearer token the gateway accepts: Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		id, err := s.auth.authenticate(r)
		if err == nil && id.Method != "token" && id.Method != "jwt" {
			err = fmt.Errorf("%w: the debug listener takes bearer tokens only", ErrUnauthenticated)
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if !id.HasRole(RoleOperator) {
			http.Error(w, fmt.Sprintf("the debug listener needs a token with the %q role: a profile shows every tenant's work in the process, so a tenant's roles (%q among them) do not open it", RoleOperator, RoleAdmin), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
