package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"
)

// The debug listener (Config.DebugListen) serves the Go profiler,
// net/http/pprof, and nothing else, on an address of its own: the lock
// API's port never serves it, and the profiler is never behind the API's
// limits or in its metrics.
//
// A profile shows every tenant's work in the process, so the listener
// serves the process operator only (gateway.Service.GuardDebug). On a
// loopback address that is the local operator, without credentials (a
// loopback Host, and no other site's web page: against DNS rebinding and
// pages that load a profile's URL). Any other address needs bearer
// authentication configured, and every request must carry a token the
// gateway accepts with the operator role (gateway.RoleOperator; a
// tenant's admin role is not enough); AllowInsecureRemote does not lift
// this. /debug/pprof/cmdline is not served: the command line may hold
// --etcd-password. A profile or trace runs for at most MaxProfileSeconds.

// MaxProfileSeconds caps the ?seconds= of every profiler request: how
// long one request may keep a CPU profile or trace running, or the
// listener's connection busy. A longer or malformed value is refused with
// 400 naming the cap.
const MaxProfileSeconds = 60

// debugBearerAuth reports whether the configuration accepts bearer tokens,
// which a non-loopback debug listener requires.
func (c Config) debugBearerAuth() bool {
	return c.Gateway.Auth.TokensFile != "" || c.Gateway.Auth.JWT()
}

func (c Config) validateDebug() error {
	if c.DebugListen == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.DebugListen); err != nil {
		return fmt.Errorf("debug listen address %q: want host:port", c.DebugListen)
	}
	if !isLoopback(c.DebugListen) && !c.debugBearerAuth() {
		return fmt.Errorf("refusing to serve the profiler on %s without bearer authentication: anyone who can connect could read the process's profiles and load its CPU. "+
			"Listen on loopback (--debug-listen 127.0.0.1:6060) and reach it through a tunnel, or configure --auth-tokens, --jwt-keys or --jwt-jwks-url", c.DebugListen)
	}
	return nil
}

// debugHandler is the profiler's mux, every path capped by
// MaxProfileSeconds.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	// Index serves the named profiles (heap, goroutine, allocs, block,
	// mutex, threadcreate) under /debug/pprof/NAME as well as the list.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not served: the command line may hold secrets", http.StatusNotFound)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkProfileSeconds(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// checkProfileSeconds refuses a ?seconds= the profiler would run longer
// than MaxProfileSeconds for, or would read as something else than was
// asked (net/http/pprof takes a malformed or non-positive value for its
// default, 30 s for a CPU profile). The trace takes fractions of a second,
// the other profiles whole seconds, as net/http/pprof parses them.
func checkProfileSeconds(r *http.Request) error {
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("the request's query or form does not parse: %v", err)
	}
	if !r.Form.Has("seconds") {
		return nil
	}
	v := r.Form.Get("seconds") // the value net/http/pprof reads
	trace := r.URL.Path == "/debug/pprof/trace"
	var sec float64
	var err error
	if trace {
		sec, err = strconv.ParseFloat(v, 64)
	} else {
		var n int64
		n, err = strconv.ParseInt(v, 10, 64)
		sec = float64(n)
	}
	if err != nil || !(sec > 0) || sec > MaxProfileSeconds {
		unit := "a whole number of seconds"
		if trace {
			unit = "a number of seconds"
		}
		return fmt.Errorf("seconds=%q: want %s above 0 and at most %d, the debug listener's cap on one profile or trace", v, unit, MaxProfileSeconds)
	}
	return nil
}

// listenDebug binds the debug listener, if one is configured. tlsCfg, the
// API listener's TLS, is reused without asking for client certificates.
func (s *Server) listenDebug(tlsCfg *tls.Config) error {
	if s.cfg.DebugListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.DebugListen)
	if err != nil {
		return fmt.Errorf("debug listen on %s: %w", s.cfg.DebugListen, err)
	}
	if !isLoopback(ln.Addr().String()) && !s.cfg.debugBearerAuth() {
		// The name resolved to a loopback address when checked, and to
		// another one when bound.
		ln.Close()
		return configErr(fmt.Errorf("refusing to serve the profiler on %s (bound to %s) without bearer authentication", s.cfg.DebugListen, ln.Addr()))
	}
	if tlsCfg != nil {
		dc := tlsCfg.Clone()
		dc.ClientAuth, dc.ClientCAs = tls.NoClientCert, nil
		ln = tls.NewListener(ln, dc)
	}
	s.debugLn = ln
	return nil
}

// serveDebug serves the profiler on the debug listener, if one is bound;
// the service must exist, as it authenticates the requests.
func (s *Server) serveDebug() {
	if s.debugLn == nil {
		return
	}
	loopback := isLoopback(s.debugLn.Addr().String())
	if s.cfg.TLSCert == "" && !loopback {
		s.log.Warn("the debug listener is not TLS: its bearer tokens cross the network in the clear", "debug_listen", s.debugLn.Addr().String())
	}
	s.debug = &http.Server{
		Handler:           s.service.GuardDebug(debugHandler(), !loopback),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		// No write timeout: a CPU profile or trace takes as long as its
		// ?seconds= asks.
	}
	ln := s.debugLn
	go func() { _ = s.debug.Serve(ln) }()
	s.log.Info("profiler serving", "addr", ln.Addr().String(), "token_required", !loopback)
}

// DebugAddr is the debug listener's address, "" without one.
func (s *Server) DebugAddr() string {
	if s.debugLn == nil {
		return ""
	}
	return s.debugLn.Addr().String()
}
