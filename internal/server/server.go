// Package server assembles a leasegate gateway process: etcd clients (or
// embedded etcd members), lock engines, the router and the HTTP server.
// cmd/leasegate maps flags onto its Config; tests start it in-process.
package server

import (
	"context"
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
	"go.uber.org/zap"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/embedetcd"
	"github.com/leasegate/leasegate/queue"
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
	// empty. Default 1.
	EmbeddedShards int
	// Prefix is the etcd key prefix. Default "/leasegate".
	Prefix string
	// Gateway configures the API.
	Gateway gateway.Config
	// ShutdownTimeout bounds a graceful stop. Default 15 s.
	ShutdownTimeout time.Duration
	// Log receives the server's logs; nil discards them.
	Log *slog.Logger
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Listen:          "127.0.0.1:7070",
		DataDir:         "./leasegate-data",
		EmbeddedShards:  1,
		Prefix:          "/leasegate",
		Gateway:         gateway.DefaultConfig(),
		ShutdownTimeout: 15 * time.Second,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen address %q: want host:port", c.Listen)
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
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("shutdown timeout %s must be positive", c.ShutdownTimeout)
	}
	return c.Gateway.Validate()
}

// Server is a running gateway process.
type Server struct {
	cfg      Config
	log      *slog.Logger
	embedded []*embedetcd.Server
	clients  []*clientv3.Client
	engines  []*queue.Engine
	service  *gateway.Service
	http     *http.Server
	ln       net.Listener
	served   chan error
}

// Start brings the process up: etcd (embedded or dialled), engines, and the
// listener. It returns once the port accepts connections.
func Start(ctx context.Context, cfg Config) (s *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s = &Server{cfg: cfg, log: cfg.Log, served: make(chan error, 1)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	defer func() {
		if err != nil {
			s.closeBackends()
		}
	}()
	clusters := cfg.Clusters
	if len(clusters) == 0 {
		if clusters, err = s.startEmbedded(); err != nil {
			return nil, err
		}
	}
	var targets []gateway.Target
	for _, cl := range clusters {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:            cl.Endpoints,
			DialTimeout:          5 * time.Second,
			DialKeepAliveTime:    10 * time.Second,
			DialKeepAliveTimeout: 5 * time.Second,
			Logger:               zap.NewNop(),
		})
		if err != nil {
			return nil, fmt.Errorf("etcd cluster %q: %w", cl.Name, err)
		}
		s.clients = append(s.clients, cli)
		qc := queue.DefaultConfig()
		qc.Prefix = cfg.Prefix
		eng, err := queue.New(cli, qc)
		if err != nil {
			return nil, err
		}
		s.engines = append(s.engines, eng)
		targets = append(targets, gateway.Target{Shard: cl.Name, Engine: eng})
	}
	router, err := newRouter(targets)
	if err != nil {
		return nil, err
	}
	if s.service, err = gateway.NewService(cfg.Gateway, router, s.log); err != nil {
		return nil, err
	}
	s.ln, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	s.http = gateway.NewHTTPServer(cfg.Listen, s.service.Handler())
	go func() { s.served <- s.http.Serve(s.ln) }()
	s.log.Info("leasegate serving", "addr", s.ln.Addr().String(), "shards", len(targets), "embedded", len(s.embedded) > 0)
	return s, nil
}

func (s *Server) startEmbedded() ([]Cluster, error) {
	var out []Cluster
	for i := 0; i < s.cfg.EmbeddedShards; i++ {
		name := fmt.Sprintf("shard-%d", i)
		dir := filepath.Join(s.cfg.DataDir, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		srv, err := embedetcd.Start(embedetcd.Config{Name: name, Dir: dir})
		if err != nil {
			return nil, err
		}
		s.embedded = append(s.embedded, srv)
		out = append(out, Cluster{Name: name, Endpoints: []string{srv.Endpoint()}})
	}
	return out, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Service is the lock service, for tests.
func (s *Server) Service() *gateway.Service { return s.service }

// Engines are the per-cluster engines, in cluster order.
func (s *Server) Engines() []*queue.Engine { return s.engines }

// Done delivers the serve loop's end.
func (s *Server) Done() <-chan error { return s.served }

// Shutdown stops gracefully: open waits end with a retryable code (their
// queue places survive for a retry elsewhere), in-flight calls finish,
// held locks stay in etcd, and etcd is closed cleanly.
func (s *Server) Shutdown(ctx context.Context) error {
	s.service.Shutdown()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.http.Shutdown(ctx)
	if err != nil {
		_ = s.http.Close()
	}
	s.closeBackends()
	return err
}

func (s *Server) closeBackends() {
	for _, e := range s.engines {
		e.Close()
	}
	for _, c := range s.clients {
		_ = c.Close()
	}
	for _, e := range s.embedded {
		e.Close()
	}
	s.engines, s.clients, s.embedded = nil, nil, nil
}
