// Package telemetry sets up OpenTelemetry for a leasegate process: a
// TracerProvider and a MeterProvider with the process's resource, W3C trace
// context and baggage propagation, exporters chosen by the standard OTEL_*
// environment variables, and Prometheus metrics on the process's own
// registry. With nothing configured the providers are nil, which
// instrumented code takes as "record nothing", so it costs next to nothing.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasegate/leasegate/internal/buildinfo"
)

// Config says what to set up. The exporters themselves are chosen by the
// standard environment variables (see New).
type Config struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES set it. Default "leasegate".
	ServiceName string
	// Version is service.version and the version label of
	// leasegate_build_info. Default: the running binary's, as --version
	// prints it (buildinfo.Read).
	Version string
	// Metrics serves Prometheus metrics (Providers.Metrics) from the
	// process's own registry. Default false: metrics are no-ops unless
	// OTEL_METRICS_EXPORTER asks for a push exporter.
	Metrics bool
}

// Providers is what instrumented code takes. A nil *Providers, and every
// nil field, means "not instrumented": instrumented code then skips its
// telemetry entirely rather than feeding a no-op provider.
type Providers struct {
	// TracerProvider creates tracers; nil when tracing is off.
	TracerProvider trace.TracerProvider
	// MeterProvider creates meters; nil when metrics are off.
	MeterProvider metric.MeterProvider
	// Propagator reads and writes W3C traceparent, tracestate and baggage.
	Propagator propagation.TextMapPropagator
	// Metrics serves the Prometheus text (and OpenMetrics, with exemplars)
	// exposition of the process's metrics; nil when not serving metrics.
	Metrics http.Handler
	// Gatherer reads the same registry in-process (the web console's
	// overview); nil when not serving metrics.
	Gatherer prometheus.Gatherer

	shutdown []func(context.Context) error
}

// Disabled returns providers that record nothing.
func Disabled() *Providers {
	return &Providers{Propagator: Propagator()}
}

// Propagator is W3C trace context plus W3C baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// New builds the providers. Tracing is on when OTEL_TRACES_EXPORTER names
// an exporter other than "none" ("otlp" or "console"), or when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set
// (OTLP then; OTEL_EXPORTER_OTLP_PROTOCOL picks "http/protobuf", the
// default, or "grpc"). Spans are batched (OTEL_BSP_*) and sampled by
// OTEL_TRACES_SAMPLER, default parent-based always-on. Metrics are pushed
// only when OTEL_METRICS_EXPORTER is "otlp" or "console"; "prometheus" is
// served by Providers.Metrics. OTEL_SDK_DISABLED=true turns everything
// off. Call Shutdown to flush and stop the exporters.
func New(ctx context.Context, cfg Config) (*Providers, error) {
	getenv := os.Getenv
	if cfg.ServiceName == "" {
		cfg.ServiceName = "leasegate"
	}
	if cfg.Version == "" {
		cfg.Version = buildinfo.Read().Version
	}
	p := Disabled()
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return p, nil
	}
	tracing := tracingWanted(getenv)
	pushMetrics := metricsPushWanted(getenv)
	if !tracing && !pushMetrics && !cfg.Metrics {
		return p, nil
	}
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if tracing {
		exp, err := autoexport.NewSpanExporter(ctx) // unset OTEL_TRACES_EXPORTER means otlp
		if err != nil {
			return nil, fmt.Errorf("telemetry: span exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
		p.TracerProvider = tp
		p.shutdown = append(p.shutdown, tp.Shutdown)
	}
	var readers []sdkmetric.Option
	if cfg.Metrics {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
		if err != nil {
			p.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exp))
		p.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})
		p.Gatherer = reg
	}
	if pushMetrics {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			p.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: metric reader: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(r))
	}
	mp := sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
	p.MeterProvider = mp
	p.shutdown = append(p.shutdown, mp.Shutdown)
	if err := RegisterBuildInfo(mp, cfg.Version); err != nil {
		p.Shutdown(ctx)
		return nil, err
	}
	return p, nil
}

// tracingWanted applies the rules of New's documentation.
func tracingWanted(getenv func(string) string) bool {
	if v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v != "" {
		return v != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

func metricsPushWanted(getenv func(string) string) bool {
	switch strings.TrimSpace(getenv("OTEL_METRICS_EXPORTER")) {
	case "", "none", "prometheus":
		return false
	}
	return true
}

func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	// Later options win: the environment overrides the defaults.
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName), semconv.ServiceVersion(cfg.Version)),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	// A partial resource (a detector failed) is still worth using.
	return res, nil
}

// RegisterBuildInfo exports leasegate_build_info{version, go_version} = 1.
func RegisterBuildInfo(mp metric.MeterProvider, version string) error {
	g, err := mp.Meter(ScopeName).Int64ObservableGauge("leasegate.build.info",
		metric.WithDescription("Always 1; the labels name the running build."))
	if err != nil {
		return fmt.Errorf("telemetry: build info: %w", err)
	}
	attrs := metric.WithAttributes(attribute.String("version", version), attribute.String("go_version", runtime.Version()))
	_, err = mp.Meter(ScopeName).RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, 1, attrs)
		return nil
	}, g)
	return err
}

// ScopeName is the instrumentation scope of leasegate's own telemetry.
const ScopeName = "github.com/leasegate/leasegate"

// Shutdown flushes buffered spans and metrics and stops the exporters. It
// blocks until done or ctx ends. It is safe on a nil receiver.
func (p *Providers) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	var errs []error
	for _, f := range p.shutdown {
		errs = append(errs, f(ctx))
	}
	p.shutdown = nil
	return errors.Join(errs...)
}
