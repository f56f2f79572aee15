package gateway

import (
	"fmt"
	"net/http"
)

// GuardDebug wraps an operator's debugging handler (the profiler, on a
// listener of its own) in the gateway's rules for who may reach it:
//
//   - requireToken false (a loopback listener): only loopback Host names
//     are served, so a web page whose DNS name rebinds to 127.0.0.1 cannot
//     start profiles from a developer's browser.
//   - requireToken true (any other listener): every request must carry a
//     bearer token the gateway accepts — a line of the tokens file or a
//     JWT it verifies — in its Authorization header; anything else is
//     refused with 401. Client certificates alone do not pass: the debug
//     listener does not ask for them.
//
// The gateway has no administrator role: a token names a tenant, and every
// tenant's token passes. A profile shows where the process spends its time
// and memory, never lock names, ids or credentials.
func (s *Service) GuardDebug(h http.Handler, requireToken bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !requireToken {
			if !loopbackHost(r.Host) {
				http.Error(w, fmt.Sprintf("Host %q is not a loopback name or address; this listener serves local clients only", r.Host), http.StatusForbidden)
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
		h.ServeHTTP(w, r)
	})
}
