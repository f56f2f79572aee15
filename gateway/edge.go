package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	connectcors "connectrpc.com/cors"
	"github.com/rs/cors"

	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// The edge: what every request meets before a handler reads its body, on
// every path of the port (Handler serves nothing that bypasses it).
//
//  1. On a loopback listener, a Host that is not a loopback name or address
//     is refused, first, before CORS answers a preflight: a page served from
//     elsewhere that rebinds its DNS name to 127.0.0.1 cannot talk to a
//     developer's gateway.
//  2. A browser request from another origin is refused unless that origin
//     is allowed (Config.CORSOrigins), which gets CORS headers and
//     preflights answered.
//  3. The caller is authenticated from its headers, or refused at once: its
//     body is never read, let alone inflated. Without authentication
//     configured, only the local operator (localOperator) gets its roles.
//  4. A compression the gateway does not speak is refused as bad input.
//  5. The body must arrive within Config.BodyReadTimeout, and a unary
//     answer be written within the fleet's RequestTimeout + SendTimeout (a
//     waiting REST acquire moves this past its wait, see restWait); a
//     streaming Acquire bounds each message it sends (see send).

// publicPaths need no credentials: health checks and reflection.
var publicPaths = []string{"/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/", "/healthz"}

func isPublic(path string) bool {
	return slices.ContainsFunc(publicPaths, func(p string) bool { return strings.HasPrefix(path, p) })
}

// streamingPaths answer with a stream whose messages are bounded one by
// one rather than as a whole.
var streamingPaths = map[string]bool{
	leasegatev1connect.LockServiceAcquireProcedure:      true,
	leasegatev1connect.ElectionServiceCampaignProcedure: true,
	leasegatev1connect.ElectionServiceObserveProcedure:  true,
	leasegatev1connect.LockServiceWatchProcedure:        true,
	leasegatev1connect.LockServiceWatchHoldProcedure:    true,
}

type senderKey struct{}

// unaryRCKey holds a unary call's *http.ResponseController.
type unaryRCKey struct{}

// edge wraps the gateway's handlers.
func (s *Service) edge(next http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	refuse := func(w http.ResponseWriter, r *http.Request, status int, code connect.Code, msg string) {
		if strings.HasPrefix(r.URL.Path, "/api/") || !ew.IsSupported(r) {
			writeRESTError(w, status, code.String(), "", msg)
			return
		}
		_ = ew.Write(w, r, connect.NewError(code, errors.New(msg)))
	}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !s.originAllowed(o, r.Host) {
			refuse(w, r, http.StatusForbidden, connect.CodePermissionDenied,
				fmt.Sprintf("requests from origin %q are not allowed; see --cors-origin", o))
			return
		}
		ctx := r.Context()
		if !isPublic(r.URL.Path) && !s.routePublic(r.URL.Path) {
			id, err := s.auth.authenticate(r)
			if err != nil {
				refuse(w, r, http.StatusUnauthorized, connect.CodeUnauthenticated, err.Error())
				return
			}
			if id.Method == "none" {
				id = withLocalRoles(id, r)
			}
			ctx = WithIdentity(ctx, id)
		}
		if err := checkEncodings(r); err != nil {
			refuse(w, r, http.StatusBadRequest, connect.CodeInvalidArgument, err.Error())
			return
		}
		rc := http.NewResponseController(w)
		now := time.Now()
		_ = rc.SetReadDeadline(now.Add(s.cfg.BodyReadTimeout))
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		if streamingPaths[r.URL.Path] {
			fw := &flushWriter{ResponseWriter: w, rc: rc}
			ctx = context.WithValue(ctx, senderKey{}, fw)
			w = fw
		} else {
			_ = rc.SetWriteDeadline(now.Add(s.router.RequestTimeout() + s.cfg.SendTimeout))
			// A REST acquire that waits moves this deadline past its wait.
			ctx = context.WithValue(ctx, unaryRCKey{}, rc)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
	if len(s.cfg.CORSOrigins) > 0 {
		h = cors.New(cors.Options{
			AllowedOrigins: s.cfg.CORSOrigins,
			AllowedMethods: connectcors.AllowedMethods(),
			AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization"),
			ExposedHeaders: connectcors.ExposedHeaders(),
			MaxAge:         7200,
		}).Handler(h)
	}
	if !s.cfg.CheckLoopbackHost {
		return h
	}
	inner := h
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			refuse(w, r, http.StatusForbidden, connect.CodePermissionDenied,
				fmt.Sprintf("Host %q is not a loopback name or address; this gateway serves local clients only", r.Host))
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline once the body has been read: a
// streaming Acquire reads its one request message and then only writes.
type deadlineBody struct {
	io.ReadCloser
	rc *http.ResponseController
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// originAllowed reports whether a browser request from origin may proceed:
// the gateway's own origin always may, others only when configured.
func (s *Service) originAllowed(origin, host string) bool {
	if u, err := url.Parse(origin); err == nil && u.Host == host {
		return true
	}
	for _, o := range s.cfg.CORSOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

// loopbackHost reports whether a Host header names this machine only.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkEncodings refuses a request compressed in a way the gateway does not
// speak: bad input, not a missing feature (Connect would answer 501).
func checkEncodings(r *http.Request) error {
	rest := strings.HasPrefix(r.URL.Path, "/api/")
	for _, h := range []string{"Content-Encoding", "Connect-Content-Encoding", "Grpc-Encoding"} {
		for _, v := range r.Header.Values(h) {
			v = strings.ToLower(strings.TrimSpace(v))
			switch {
			case v == "" || v == "identity":
			case v == "gzip" && !rest:
			case rest:
				return fmt.Errorf("%s %q is not accepted on the REST API; send the body uncompressed", h, v)
			default:
				return fmt.Errorf("%s %q is not supported; send gzip or no compression", h, v)
			}
		}
	}
	return nil
}

// flushWriter records whether the flushes of a streaming Acquire reached
// the connection: Connect flushes each message it sends and cannot report
// a flush that failed — a stream reset because the client stopped reading
// — so a message that never left would look sent.
type flushWriter struct {
	http.ResponseWriter
	rc  *http.ResponseController
	err error // the last failed flush since send began
}

func (f *flushWriter) Flush() {
	if err := f.rc.Flush(); err != nil {
		f.err = err
	}
}

func (f *flushWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// send writes one message of a streaming Acquire within SendTimeout: a
// client that stops reading is detected, not waited for. It reports a
// message whose flush failed as not sent, and only such a message: a
// message that reached the connection is sent, whatever the client does
// next.
func (s *Service) send(ctx context.Context, fn func() error) error {
	fw, _ := ctx.Value(senderKey{}).(*flushWriter)
	if fw == nil {
		return fn()
	}
	fw.err = nil
	_ = fw.rc.SetWriteDeadline(time.Now().Add(s.cfg.SendTimeout))
	defer func() { _ = fw.rc.SetWriteDeadline(time.Time{}) }()
	if err := fn(); err != nil {
		return err
	}
	if fw.err != nil {
		return fmt.Errorf("the message was not delivered: %w", fw.err)
	}
	return nil
}

// route is a handler served beside the API through Handle.
type route struct {
	pattern string
	h       http.Handler
	public  bool
}

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
		if strings.HasSuffix(rt.pattern, "/") { // a subtree
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
