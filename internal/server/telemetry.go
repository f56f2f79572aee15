package server

import (
	"time"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/telemetry"
	"github.com/leasegate/leasegate/locks"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
	"github.com/leasegate/leasegate/ui"
)

// gatewayTelemetry is the lock service's share of the providers.
func gatewayTelemetry(p *telemetry.Providers) gateway.Telemetry {
	if p == nil {
		return gateway.Telemetry{}
	}
	return gateway.Telemetry{TracerProvider: p.TracerProvider, MeterProvider: p.MeterProvider, Propagator: p.Propagator}
}

// instrumentRouter gives the engines their tracer and meter and counts
// breaker transitions, keeping any hook the configuration already has.
func (s *Server) instrumentRouter(rc *locks.RouterConfig, p *telemetry.Providers) error {
	if p == nil {
		return nil
	}
	gt := gatewayTelemetry(p)
	rc.Queue.Telemetry = queue.Telemetry{TracerProvider: gt.TracerProvider, MeterProvider: gt.MeterProvider}
	if gt.MeterProvider == nil {
		return nil
	}
	tc, err := shard.BreakerTransitions(gt.MeterProvider)
	if err != nil {
		return err
	}
	s.transitions = tc
	if prev := rc.Breaker.OnStateChange; prev != nil {
		rc.Breaker.OnStateChange = func(cluster string, from, to shard.State) {
			prev(cluster, from, to)
			tc.OnStateChange(cluster, from, to)
		}
	} else {
		rc.Breaker.OnStateChange = tc.OnStateChange
	}
	return nil
}

// registerRouterMetrics exports the per-shard gauges; the returned
// function stops them.
func (s *Server) registerRouterMetrics(r *locks.Router, p *telemetry.Providers, every time.Duration) (func(), error) {
	if p == nil || p.MeterProvider == nil {
		return nil, nil
	}
	if s.transitions != nil {
		for _, b := range r.Backends() {
			s.transitions.Touch(b.Name)
		}
	}
	return r.RegisterMetrics(p.MeterProvider, locks.MetricsConfig{CountEvery: every})
}

// mountMetrics serves GET /metrics on the gateway's port when the
// providers have a Prometheus registry, behind the gateway's edge like
// every path of the port (the loopback Host and origin checks). The path
// answers without authentication, for scrapers: it shows counts and
// latencies by shard, never names, ids or secrets.
func (s *Server) mountMetrics(p *telemetry.Providers) {
	if p == nil || p.Metrics == nil {
		return
	}
	s.service.Handle("/metrics", p.Metrics, true)
}

// mountConsole serves the web console at /ui/ beside the API; it reads
// the gateway's own metrics when p serves them.
func (s *Server) mountConsole(p *telemetry.Providers) error {
	cfg := ui.Config{Router: s.router, Health: s.service.Health().Shards}
	if p != nil && p.Gatherer != nil {
		cfg.Metrics = p.Gatherer
	}
	con, err := ui.New(cfg)
	if err != nil {
		return err
	}
	con.Mount(s.service)
	return nil
}
