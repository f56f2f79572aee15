package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"

	"github.com/leasegate/leasegate/internal/buildinfo"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
)

// telemetryFlags are the flags for metrics; traces are configured by the
// standard OTEL_* environment variables (see telemetry.New), except whether
// callers' traces are trusted, which is server.Config's.
type telemetryFlags struct {
	metrics bool
}

func addTelemetryFlags(f *pflag.FlagSet, cfg *server.Config, tf *telemetryFlags) {
	f.BoolVar(&tf.metrics, "metrics", true, "serve Prometheus metrics on GET /metrics (false makes metrics no-ops); traces follow the OTEL_* environment variables")
	f.BoolVar(&cfg.TracePublicEndpoint, "trace-public-endpoint", false, "start a new trace for every call, linked to the caller's traceparent, instead of continuing it (for gateways untrusted callers reach)")
}

// serveWithTelemetry sets up OpenTelemetry, serves, and flushes the
// exporters on the way out.
func serveWithTelemetry(ctx context.Context, cfg server.Config, log *slog.Logger, tf telemetryFlags) error {
	p, err := telemetry.New(ctx, telemetry.Config{Version: buildinfo.Read().Version, Metrics: tf.metrics})
	if err != nil {
		return usageError{err}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			log.Warn("telemetry not flushed", "err", err)
		}
	}()
	// Libraries that use the global providers join the same pipeline.
	if p.TracerProvider != nil {
		otel.SetTracerProvider(p.TracerProvider)
	}
	if p.MeterProvider != nil {
		otel.SetMeterProvider(p.MeterProvider)
	}
	otel.SetTextMapPropagator(p.Propagator)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("telemetry", "err", err) }))
	log.Info("telemetry", "tracing", p.TracerProvider != nil, "metrics", p.MeterProvider != nil, "prometheus", p.Metrics != nil)
	cfg.Telemetry = p
	return serve(ctx, cfg, log)
}
