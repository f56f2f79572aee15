package ui

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/locks"
)

// Paths the console is served under.
const (
	// Prefix serves the static front end, without credentials: it holds
	// no data.
	Prefix = "/ui/"
	// APIPrefix serves the console's JSON, with the API's authentication.
	APIPrefix = "/ui/api/"
)

// Config configures the console.
type Config struct {
	// Router is the gateway's router; its shards are the overview's rows.
	// Required.
	Router *locks.Router
	// Health reports each shard's etcd as "ok" or "unavailable"
	// (gateway.Health.Shards); nil leaves the health column empty.
	Health func(context.Context) map[string]string
	// Metrics is the gateway's own Prometheus registry, read for the
	// keepalive counts and the handoff-latency histogram; nil (metrics
	// off) leaves them out.
	Metrics prometheus.Gatherer
	// ScanLimit bounds the keys read from one shard to count its held
	// locks and waiters (one keys-only range read per shard, at most once
	// a second however many consoles are open, then the values the grant
	// rule needs of the names with more than one key: at most one per
	// key read). Default 100,000; past it the counts are marked partial.
	ScanLimit int64
	// ScanTimeout bounds one overview's reads. Default 2 s.
	ScanTimeout time.Duration
}

// DefaultConfig returns the defaults of every field but Router.
func DefaultConfig() Config {
	return Config{ScanLimit: 100_000, ScanTimeout: 2 * time.Second}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Router == nil {
		return errors.New("ui: Router is required")
	}
	if c.ScanLimit < 1 {
		return errors.New("ui: scan limit must be at least 1")
	}
	if c.ScanTimeout <= 0 {
		return errors.New("ui: scan timeout must be positive")
	}
	return nil
}

// Console serves the web console.
type Console struct {
	cfg Config

	mu      sync.Mutex
	counted map[string]*counted // by scope key
}

// New returns the console for cfg; zero ScanLimit and ScanTimeout take
// their defaults.
func New(cfg Config) (*Console, error) {
	d := DefaultConfig()
	if cfg.ScanLimit == 0 {
		cfg.ScanLimit = d.ScanLimit
	}
	if cfg.ScanTimeout == 0 {
		cfg.ScanTimeout = d.ScanTimeout
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Console{cfg: cfg, counted: map[string]*counted{}}, nil
}

// Mount serves the console on svc's port: the front end under Prefix
// without credentials, its JSON under APIPrefix behind the API's
// authentication. Call it before svc.Handler.
func (c *Console) Mount(svc *gateway.Service) {
	svc.Handle(Prefix, staticHandler(), true)
	svc.Handle(APIPrefix, c.apiHandler(), false)
}

func (c *Console) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+APIPrefix+"overview", c.serveOverview)
	mux.HandleFunc(APIPrefix, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]string{"code": "not_found", "message": "no such console endpoint; GET " + APIPrefix + "overview"}})
	})
	return mux
}
