// Package server assembles a leasegate gateway process: etcd clients (or
// embedded etcd members), lock engines, the router and the HTTP server.
// cmd/leasegate maps flags onto its Config; tests start it in-process.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/embedetcd"
	"github.com/leasegate/leasegate/internal/reload"
	"github.com/leasegate/leasegate/internal/telemetry"
	"github.com/leasegate/leasegate/locks"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// Cluster is one etcd cluster the gateway uses.
type Cluster struct {
	// Name identifies the cluster in lock ids and the shard map.
	Name string
	// Endpoints are its client URLs.
	Endpoints []string
}

// Config configures a gateway process.
type Config struct {
	// Listen is the address to serve on. Default "127.0.0.1:7070".
	Listen string
	// DataDir holds embedded etcd data. Default "./leasegate-data".
	DataDir string
	// Clusters are external etcd clusters; empty starts embedded ones.
	Clusters []Cluster
	// EmbeddedShards is how many embedded clusters to start when Clusters is
	// empty. Default 3.
	EmbeddedShards int
	// EmbeddedEtcdListen, when set, is the loopback host:port the first
	// embedded cluster serves etcd clients on; the i-th serves on the port
	// i above it. Empty: each picks a free loopback port at every start.
	// Only with embedded clusters (no Clusters).
	EmbeddedEtcdListen string
	// Prefix is the etcd key prefix of every key the process writes: the
	// fleet's (Fleet.Prefix is set from it) and the id keys'. Default
	// "/leasegate".
	Prefix string
	// Gateway configures the API.
	Gateway gateway.Config
	// Fleet configures the fleet: each cluster's engine (Fleet.Queue), its
	// circuit breaker (Fleet.Breaker; its OpenTimeout is 100 ms to 1 min,
	// about the etcd clusters' election timeout) and reach, the bound on
	// each call (Fleet.RequestTimeout), and whether the stored shard map
	// is followed (Fleet.Watch; a process that does not follow it reloads
	// only when a cluster refuses an enqueue). Its Prefix, Endpoints,
	// Dial, Log and Clock are the process's own: Prefix, Clusters, its
	// dialer, Log and Gateway.Clock. Default locks.DefaultRouterConfig().
	Fleet locks.RouterConfig
	// ShutdownTimeout bounds a graceful stop. Default 15 s.
	ShutdownTimeout time.Duration
	// TLSCert and TLSKey, when set, make the listener serve TLS only.
	TLSCert, TLSKey string
	// TLSClientCA, when set, verifies client certificates against it and
	// takes identities from them (mTLS).
	TLSClientCA string
	// AllowInsecureRemote permits a non-loopback listener without any
	// authentication. Default false: such a server refuses to start.
	AllowInsecureRemote bool
	// MaxStreamsPerConn caps concurrent HTTP/2 streams per connection.
	// Default 1000.
	MaxStreamsPerConn uint32
	// MaxConns caps the connections the listener holds open. Default
	// 10,000; 0 is unlimited.
	MaxConns int
	// MaxConnsPerIP caps the connections from one remote address. Default
	// 1,000; 0 is unlimited.
	MaxConnsPerIP int
	// EtcdTLS configures the connections to etcd.
	EtcdTLS EtcdSecurity
	// Log receives the server's logs; nil discards them.
	Log *slog.Logger
	// Telemetry receives traces and metrics and serves GET /metrics; nil
	// (the default) records none.
	Telemetry *telemetry.Providers
	// TracePublicEndpoint makes every call's server span the root of a new
	// trace linked to the caller's trace context, instead of its child:
	// for gateways that untrusted callers reach (see
	// gateway.Telemetry.PublicEndpoint). Default false.
	TracePublicEndpoint bool
	// KeyCountInterval is how often each shard's lock keys are counted for
	// leasegate_lock_keys. Default 15 s.
	KeyCountInterval time.Duration
	// IDKeysFile, when set, names the file of keys that sign lock and
	// session ids (gateway.ParseIDKeys's form, mode 0600); every gateway of
	// the fleet must read the same keys. Empty: the keys live in the home
	// etcd cluster, created by the first gateway, and changes made there
	// (leasegate id-keys rotate) are followed.
	IDKeysFile string
	// DebugListen, when set, serves the Go profiler (net/http/pprof) on
	// this address, apart from the API. A loopback address answers without
	// credentials; any other needs bearer authentication (a tokens file or
	// JWTs) and a valid bearer token on every request. Default "" (off).
	DebugListen string
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Listen:            "127.0.0.1:7070",
		DataDir:           "./leasegate-data",
		EmbeddedShards:    3,
		Prefix:            shard.DefaultPrefix,
		Gateway:           gateway.DefaultConfig(),
		ShutdownTimeout:   15 * time.Second,
		MaxStreamsPerConn: 1000,
		MaxConns:          10_000,
		MaxConnsPerIP:     1_000,
		Fleet:             locks.DefaultRouterConfig(),
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen address %q: want host:port", c.Listen)
	}
	if err := shard.CheckPrefix(c.Prefix); err != nil {
		return fmt.Errorf("--prefix: %w", err)
	}
	if len(c.Clusters) == 0 && c.DataDir == "" {
		return errors.New("data dir is empty; it is needed for embedded etcd")
	}
	if len(c.Clusters) == 0 && (c.EmbeddedShards < 1 || c.EmbeddedShards > 16) {
		return fmt.Errorf("embedded shards %d is outside 1 to 16", c.EmbeddedShards)
	}
	seen := map[string]bool{}
	for _, cl := range c.Clusters {
		if cl.Name == "" || strings.ContainsAny(cl.Name, "=,/ ") {
			return fmt.Errorf("cluster name %q: want a non-empty name without '=', ',', '/' or spaces", cl.Name)
		}
		if seen[cl.Name] {
			return fmt.Errorf("cluster name %q appears twice", cl.Name)
		}
		seen[cl.Name] = true
		if len(cl.Endpoints) == 0 {
			return fmt.Errorf("cluster %q has no endpoints", cl.Name)
		}
		for _, ep := range cl.Endpoints {
			if !strings.HasPrefix(ep, "http://") && !strings.HasPrefix(ep, "https://") {
				return fmt.Errorf("cluster %q endpoint %q: want an http:// or https:// URL", cl.Name, ep)
			}
		}
	}
	if err := c.Fleet.Validate(); err != nil {
		return err
	}
	if ot := c.Fleet.Breaker.OpenTimeout; ot != 0 && (ot < 100*time.Millisecond || ot > time.Minute) {
		return fmt.Errorf("breaker open timeout %s is outside 100ms to 1m", ot)
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("shutdown timeout %s must be positive", c.ShutdownTimeout)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key: client certificates are verified over TLS")
	}
	if c.MaxStreamsPerConn < 1 || c.MaxStreamsPerConn > 100000 {
		return fmt.Errorf("max streams per connection %d is outside 1 to 100000", c.MaxStreamsPerConn)
	}
	if c.MaxConns < 0 || c.MaxConnsPerIP < 0 {
		return fmt.Errorf("max connections %d and per IP %d: want 0 (unlimited) or positive", c.MaxConns, c.MaxConnsPerIP)
	}
	if !c.authEnabled() && !c.AllowInsecureRemote && !isLoopback(c.Listen) {
		return fmt.Errorf("refusing to serve %s without authentication: anyone who can connect could take or steal any lock. "+
			"Configure --auth-tokens, --jwt-keys, --jwt-jwks-url or --tls-client-ca, listen on loopback, or pass --allow-insecure-remote", c.Listen)
	}
	if err := c.validateDebug(); err != nil {
		return err
	}
	if err := c.validateEmbeddedEtcdListen(); err != nil {
		return err
	}
	if err := c.EtcdTLS.Validate(); err != nil {
		return err
	}
	return c.Gateway.Validate()
}

func (c Config) authEnabled() bool {
	a := c.Gateway.Auth
	a.MTLS = a.MTLS || c.TLSClientCA != ""
	return a.Enabled()
}

// lookupIP resolves listen addresses' names; tests replace it.
var lookupIP = net.LookupIP

// isLoopback reports whether a listen address only accepts local peers. A
// name is resolved, and counts only if every address it resolves to is a
// loopback one: "localhost" is whatever the resolver says it is.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	if host == "" {
		return false // every interface
	}
	ips, err := lookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// Server is a running gateway process.
type Server struct {
	cfg      Config
	log      *slog.Logger
	embedded []*embedetcd.Server
	home     *clientv3.Client
	idKeys   *storedIDKeys
	router   *locks.Router
	stopMet  func()
	service  *gateway.Service
	http     *http.Server
	ln       net.Listener
	served   chan error
	tlsPair  *reload.Value[*tls.Certificate] // nil without TLS
	debug    *http.Server                    // nil without DebugListen
	debugLn  net.Listener

	// dial connects to an etcd cluster with the configured security.
	dial func(name string, endpoints []string) (*clientv3.Client, error)
	// auth is the authenticator until the service takes it over.
	auth *gateway.Authenticator
	// dataLock holds DataDir while embedded members serve from it.
	dataLock *embedetcd.DirLock

	// transitions counts breaker state changes; nil without metrics.
	transitions *shard.TransitionCounter
}

// ConfigError is an error of Start caused by the configuration: a value
// out of range, or a file it names that is missing or does not load.
// Changing the configuration fixes it (cmd/leasegate exits 2 on it). Every
// other error of Start comes from the environment: a port in use, a data
// directory another process holds or cannot be written, an etcd cluster
// that does not answer.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }

// Unwrap returns the error of the configuration.
func (e *ConfigError) Unwrap() error { return e.Err }

// configErr marks err, when not nil, as an error of the configuration.
func configErr(err error) error {
	if err == nil {
		return nil
	}
	return &ConfigError{Err: err}
}

// Start brings the process up and returns once the port accepts
// connections. It checks what it can without etcd first — the files the
// configuration names, then the listeners' addresses — so a mistake there
// is reported at once, before any etcd member starts or is dialled; then
// it starts etcd (embedded or dialled), the engines and the service. An
// error leaves nothing running: whatever was started is stopped again.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, configErr(err)
	}
	s := &Server{cfg: cfg, log: cfg.Log, served: make(chan error, 1)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.start(ctx); err != nil {
		s.abort()
		return nil, err
	}
	return s, nil
}

// start is Start's work on s, whose fields it fills as it goes: abort
// undoes a start that failed part way, whatever it had reached.
func (s *Server) start(ctx context.Context) error {
	cfg := s.cfg
	cfg.Gateway.Auth.MTLS = cfg.Gateway.Auth.MTLS || cfg.TLSClientCA != ""
	if !cfg.authEnabled() && !isLoopback(cfg.Listen) {
		s.log.Error("SERVING WITHOUT AUTHENTICATION on a non-loopback address: anyone who can connect can take, renew or release any lock",
			"listen", cfg.Listen, "flag", "--allow-insecure-remote")
	}
	// The files, each read once here; a bad one is the configuration's.
	tlsCfg, pair, err := cfg.listenerTLS(s.log)
	if err != nil {
		return configErr(err)
	}
	s.tlsPair = pair
	if s.dial, err = cfg.EtcdTLS.Dialer(cfg.Telemetry.EtcdDialOptions); err != nil {
		return configErr(err)
	}
	if cfg.IDKeysFile != "" {
		if cfg.Gateway.IDKeys, err = LoadIDKeysFile(cfg.IDKeysFile); err != nil {
			return configErr(err)
		}
	}
	if s.auth, err = gateway.NewAuthenticator(cfg.Gateway.Auth, s.log, cfg.Gateway.Clock); err != nil {
		return configErr(err)
	}
	// The data directory, then the ports, before etcd starts: a second
	// gateway on the same directory, or a port in use, is found at once.
	// Connections made meanwhile wait in the listen backlog.
	if len(cfg.Clusters) == 0 {
		if s.dataLock, err = embedetcd.LockDir(cfg.DataDir); err != nil {
			return dataDirErr(err)
		}
	}
	if err := s.listen(tlsCfg); err != nil {
		return err
	}
	if len(cfg.Clusters) == 0 {
		if err := checkEmbeddedEtcdListen(cfg.embeddedEtcdAddrs()); err != nil {
			return err
		}
	}
	clusters := cfg.Clusters
	if len(clusters) == 0 {
		if clusters, err = s.startEmbedded(); err != nil {
			return err
		}
	}
	if err := s.startRouter(ctx, clusters); err != nil {
		return err
	}
	cfg.Gateway.Telemetry = gatewayTelemetry(cfg.Telemetry)
	cfg.Gateway.Telemetry.PublicEndpoint = cfg.TracePublicEndpoint
	// A loopback listener serves local clients only: a Host naming
	// anything else is a web page's DNS rebinding, refused.
	cfg.Gateway.CheckLoopbackHost = isLoopback(cfg.Listen)
	if cfg.IDKeysFile == "" {
		kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s.idKeys, err = followIDKeys(kctx, s.home, idKeysPrefix(cfg.Prefix), s.log)
		cancel()
		if err != nil {
			return fmt.Errorf("id keys: %w", err)
		}
		cfg.Gateway.IDKeys = s.idKeys
	}
	cfg.Gateway.Authenticator, s.auth = s.auth, nil // the service owns it now
	if s.service, err = gateway.NewService(cfg.Gateway, s.router, s.log); err != nil {
		return configErr(err)
	}
	s.mountMetrics(cfg.Telemetry)
	if err := s.mountConsole(cfg.Telemetry); err != nil {
		return err
	}
	s.http = gateway.NewHTTPServer(cfg.Listen, s.service.Handler())
	s.http.HTTP2.MaxConcurrentStreams = int(cfg.MaxStreamsPerConn)
	if tlsCfg != nil {
		s.http.TLSConfig = tlsCfg
	}
	s.serveDebug()
	go func() { s.served <- s.http.Serve(s.ln) }()
	s.log.Info("leasegate serving", "addr", s.ln.Addr().String(), "shards", s.router.Map().ClusterNames(), "epoch", s.router.Map().Epoch, "embedded", len(s.embedded) > 0)
	return nil
}

// listen binds the API's listener and, when configured, the debug one.
func (s *Server) listen(tlsCfg *tls.Config) error {
	cfg := s.cfg
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	if !cfg.authEnabled() && !cfg.AllowInsecureRemote && !isLoopback(ln.Addr().String()) {
		// The name resolved to a loopback address when checked, and to
		// another one when bound: refuse as for any remote listener.
		ln.Close()
		return configErr(fmt.Errorf("refusing to serve %s (bound to %s) without authentication", cfg.Listen, ln.Addr()))
	}
	s.ln = gateway.LimitListener(ln, cfg.MaxConns, cfg.MaxConnsPerIP)
	if tlsCfg != nil {
		s.ln = tls.NewListener(s.ln, tlsCfg)
	}
	return s.listenDebug(tlsCfg)
}

// abort stops what a failed start had started, in the reverse order.
func (s *Server) abort() {
	if s.debugLn != nil {
		_ = s.debugLn.Close()
	}
	if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.service != nil {
		s.service.Shutdown()
	}
	if s.auth != nil {
		s.auth.Close()
	}
	s.closeBackends()
}

func (s *Server) startEmbedded() ([]Cluster, error) {
	var out []Cluster
	addrs := s.cfg.embeddedEtcdAddrs()
	for i := 0; i < s.cfg.EmbeddedShards; i++ {
		name := fmt.Sprintf("shard-%d", i)
		dir := filepath.Join(s.cfg.DataDir, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("data dir %s: %w", s.cfg.DataDir, err)
		}
		ec := embedetcd.Config{Name: name, Dir: dir}
		if addrs != nil {
			ec.ClientAddr = addrs[i]
			var err error
			if ec.PeerAddr, err = freeAddrBut(addrs); err != nil {
				return nil, err
			}
		}
		srv, err := embedetcd.Start(ec)
		if err != nil {
			if addrs != nil {
				err = fmt.Errorf("--embedded-etcd-listen %s: %s on %s: %w", s.cfg.EmbeddedEtcdListen, name, addrs[i], err)
			}
			return nil, dataDirErr(err)
		}
		s.embedded = append(s.embedded, srv)
		out = append(out, Cluster{Name: name, Endpoints: []string{srv.Endpoint()}})
	}
	if addrs != nil {
		logEmbeddedEtcdListen(s.log, s.cfg.Prefix, out)
	}
	return out, nil
}

// dataDirErr adds to an error of the embedded etcd's data directory what
// to do when another process holds it.
func dataDirErr(err error) error {
	if errors.Is(err, embedetcd.ErrDirInUse) {
		return fmt.Errorf("%w (another leasegate?); stop that process, or start this one with another --data-dir", err)
	}
	return err
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the server's base URL.
func (s *Server) URL() string {
	if s.cfg.TLSCert != "" {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// Service is the lock service, for tests.
func (s *Server) Service() *gateway.Service { return s.service }

// Engines are the engines of the clusters names are hashed over, in map order.
func (s *Server) Engines() []*queue.Engine {
	var out []*queue.Engine
	for _, b := range s.router.Backends() {
		out = append(out, b.Engine)
	}
	return out
}

// Router is the router that owns the clusters' lock engines.
func (s *Server) Router() *locks.Router { return s.router }

// ReloadFiles looks at the files the server reads credentials from — the
// tokens file, the JWT keys file, the TLS certificate and key — now, and
// loads those that changed, as it does on its own at most a second after
// a change. A file that does not load leaves what it held in force; the
// error names it. It blocks for the reads.
func (s *Server) ReloadFiles() error {
	err := s.service.ReloadCredentials()
	if s.tlsPair != nil {
		err = errors.Join(err, s.tlsPair.Check())
	}
	return err
}

// Done delivers the serve loop's end.
func (s *Server) Done() <-chan error { return s.served }

// Shutdown stops gracefully: open waits end with a retryable code (their
// queue places survive for a retry elsewhere), in-flight calls finish,
// held locks stay in etcd, and etcd is closed cleanly.
func (s *Server) Shutdown(ctx context.Context) error {
	s.service.Shutdown()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
	defer cancel()
	if s.debug != nil {
		// A profile in progress is cut short rather than waited for.
		_ = s.debug.Close()
	}
	err := s.http.Shutdown(ctx)
	if err != nil {
		_ = s.http.Close()
	}
	s.closeBackends()
	return err
}

func (s *Server) closeBackends() {
	if s.stopMet != nil {
		s.stopMet()
		s.stopMet = nil
	}
	if s.router != nil {
		s.router.Close()
	}
	if s.idKeys != nil {
		s.idKeys.close()
		s.idKeys = nil
	}
	if s.home != nil {
		_ = s.home.Close()
	}
	for _, e := range s.embedded {
		e.Close()
	}
	s.dataLock.Unlock()
	s.router, s.home, s.embedded, s.dataLock = nil, nil, nil, nil
}

// How long Start waits for the home cluster to answer, and when it says
// that it waits.
const (
	homeWait       = 30 * time.Second
	homeWaitNotice = 3 * time.Second
)

// startRouter loads (or, on first start, stores) the shard map in the home
// cluster — the first configured — and follows it.
func (s *Server) startRouter(ctx context.Context, clusters []Cluster) error {
	initial := shard.Map{Epoch: shard.MinEpoch}
	overrides := map[string][]string{}
	for _, c := range clusters {
		initial.Clusters = append(initial.Clusters, shard.Cluster{Name: c.Name, Endpoints: c.Endpoints})
		overrides[c.Name] = c.Endpoints
	}
	dial := s.dial
	home, err := dial(clusters[0].Name, clusters[0].Endpoints)
	if err != nil {
		return fmt.Errorf("etcd cluster %q: %w", clusters[0].Name, err)
	}
	s.home = home
	rc := s.cfg.Fleet
	rc.Prefix = s.cfg.Prefix
	rc.Endpoints = overrides
	rc.Log = s.log
	rc.Dial = dial
	rc.Clock = s.cfg.Gateway.Clock
	if err := s.instrumentRouter(&rc, s.cfg.Telemetry); err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, homeWait)
	defer cancel()
	// The home cluster may be starting beside the gateway: it is waited
	// for, and the wait is said, so a gateway that seems to hang says why.
	where := fmt.Sprintf("home etcd cluster %q at %s", clusters[0].Name, strings.Join(clusters[0].Endpoints, ","))
	waiting := time.AfterFunc(homeWaitNotice, func() {
		s.log.Warn("no answer from the home etcd cluster yet; waiting", "cluster", clusters[0].Name, "endpoints", clusters[0].Endpoints, "up_to", homeWait)
	})
	s.router, err = locks.NewRouter(lctx, home, initial, rc)
	waiting.Stop()
	if err != nil {
		if ctx.Err() == nil && lctx.Err() != nil && home.ActiveConnection().GetState() != connectivity.Ready {
			return fmt.Errorf("%s: no connection within %s: is etcd running there?", where, homeWait)
		}
		return fmt.Errorf("%s: %w", where, err)
	}
	if s.stopMet, err = s.registerRouterMetrics(s.router, s.cfg.Telemetry, s.cfg.KeyCountInterval); err != nil {
		return err
	}
	return nil
}
