package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Loopback trust. Without authentication configured, the process's
// operator is whoever works on its machine: a caller that could reach etcd
// as easily. A web page in that operator's browser is not, though its
// requests too come from a loopback address: a page whose DNS name rebinds
// to 127.0.0.1 sends its own name as Host; a page let through by
// --cors-origin (even '*') sends its Origin; and a GET a page makes through
// an <img> or a no-cors fetch carries no Origin, but its browser marks it
// Sec-Fetch-Site: cross-site. localOperator tells them apart, and every
// grant of loopback trust goes through it: the roles the edge gives an
// unauthenticated caller, and the loopback debug listener (GuardDebug).

// localOperator returns nil when r comes from the machine's operator: from
// a loopback address, to a loopback Host, and, when a browser sent it,
// from a page of a loopback origin that the browser does not call
// cross-site. Otherwise it says why r is not the operator's.
func localOperator(r *http.Request) error {
	if !loopbackPeer(r.RemoteAddr) {
		return fmt.Errorf("it comes from %s, not from a loopback address", r.RemoteAddr)
	}
	if !loopbackHost(r.Host) {
		return fmt.Errorf("its Host %q is not a loopback name or address", r.Host)
	}
	for _, o := range r.Header.Values("Origin") {
		if !loopbackOrigin(o) {
			return fmt.Errorf("it comes from a web page of origin %q", o)
		}
	}
	for _, v := range r.Header.Values("Sec-Fetch-Site") {
		if strings.EqualFold(strings.TrimSpace(v), "cross-site") {
			return fmt.Errorf("its browser marks it as sent by another site's page (Sec-Fetch-Site: %s)", v)
		}
	}
	return nil
}

// loopbackOrigin reports whether a browser's Origin header names a page
// served from this machine: http or https on a loopback name or address.
// "null" (a sandboxed frame, a file) is not one.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return false
	}
	return loopbackHost(u.Host)
}

// withLocalRoles gives an unauthenticated caller the local operator's roles,
// RoleAdmin and RoleOperator, when r is the operator's (localOperator), and
// otherwise records why not, for the refusal of a call that needs them.
func withLocalRoles(id Identity, r *http.Request) Identity {
	if err := localOperator(r); err != nil {
		id.notLocal = err
		return id
	}
	id.Roles = []string{RoleAdmin, RoleOperator}
	return id
}

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
