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
//     JWT it verifies — in its Authorization header (401 otherwise), and
//     the token must grant the admin role (RoleAdmin; 403 otherwise): a
//     profile covers the whole process, every tenant's work in it, so it
//     is an operator's, not a tenant's. Client certificates alone do not
//     pass: the debug listener does not ask for them.
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
		if !id.HasRole(RoleAdmin) {
			http.Error(w, fmt.Sprintf("the debug listener needs a token with the %q role", RoleAdmin), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
