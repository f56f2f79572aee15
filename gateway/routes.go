package gateway

import (
	"net/http"
	"strings"
)

// route is a handler served beside the API through Handle.
type route struct {
	prefix string
	h      http.Handler
	public bool
}

// Handle serves h for every path under prefix (which ends in '/') on the
// gateway's port, behind the same edge as the API: the loopback Host check,
// the origin check, request deadlines and, unless public, authentication —
// h then finds the caller with IdentityFrom. A public route answers
// without credentials, as /healthz does: only for what shows nothing of
// any tenant's locks (static files). The longest prefix decides, so a
// public "/ui/" may hold an authenticated "/ui/api/". GET of the prefix
// without its '/' redirects to it. Call Handle before Handler; it does not
// block.
func (s *Service) Handle(prefix string, h http.Handler, public bool) {
	if !strings.HasSuffix(prefix, "/") {
		panic("gateway: Handle prefix " + prefix + " must end in '/'")
	}
	s.routes = append(s.routes, route{prefix: prefix, h: h, public: public})
}

// routePublic reports whether path falls under a public route of Handle
// (the longest prefix that matches decides), or is a public route's prefix
// without its '/', which the mux redirects.
func (s *Service) routePublic(path string) bool {
	best, public := -1, false
	for _, rt := range s.routes {
		if path == strings.TrimSuffix(rt.prefix, "/") && rt.public {
			return true
		}
		if strings.HasPrefix(path, rt.prefix) && len(rt.prefix) > best {
			best, public = len(rt.prefix), rt.public
		}
	}
	return public
}
