package gateway

import (
	"net/http"
	"strings"
)

// route is a handler served beside the API through Handle.
type route struct {
	pattern string
	h       http.Handler
	public  bool
}

// subtree reports whether the route serves every path under its pattern.
func (rt route) subtree() bool { return strings.HasSuffix(rt.pattern, "/") }

// Handle serves h on the gateway's port, behind the same edge as the API:
// the loopback Host check, the origin check, request deadlines and, unless
// public, authentication — h then finds the caller with IdentityFrom. A
// pattern ending in '/' serves every path under it (GET of it without its
// '/' redirects to it), any other pattern that one path. A public route
// answers without credentials, as /healthz does: only for what shows
// nothing of any tenant's locks (static files, metrics). The longest
// pattern decides, so a public "/ui/" may hold an authenticated
// "/ui/api/". Call Handle before Handler; it does not block.
func (s *Service) Handle(pattern string, h http.Handler, public bool) {
	if !strings.HasPrefix(pattern, "/") {
		panic("gateway: Handle pattern " + pattern + " must be a path starting with '/'")
	}
	s.routes = append(s.routes, route{pattern: pattern, h: h, public: public})
}

// routePublic reports whether path falls under a public route of Handle
// (the longest pattern that matches decides), or is a public subtree's
// pattern without its '/', which the mux redirects.
func (s *Service) routePublic(path string) bool {
	best, public := -1, false
	for _, rt := range s.routes {
		match := path == rt.pattern
		if rt.subtree() {
			if path == strings.TrimSuffix(rt.pattern, "/") && rt.public {
				return true
			}
			match = strings.HasPrefix(path, rt.pattern)
		}
		if match && len(rt.pattern) > best {
			best, public = len(rt.pattern), rt.public
		}
	}
	return public
}
