package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// The debug listener (Config.DebugListen) serves the Go profiler,
// net/http/pprof, and nothing else, on an address of its own: the lock
// API's port never serves it, and the profiler is never behind the API's
// limits or in its metrics.
//
// On a loopback address it answers local clients without credentials (and
// refuses Host names that are not loopback ones, against DNS rebinding).
// Any other address needs bearer authentication configured, and every
// request must carry a token the gateway accepts; AllowInsecureRemote does
// not lift this. /debug/pprof/cmdline is not served: the command line may
// hold --etcd-password.

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

// debugHandler is the profiler's mux.
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
	return mux
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
