// Command leasegate runs the lock gateway. With no --etcd it starts etcd
// embedded in the process, so `go run ./cmd/leasegate` is a working lock
// service on 127.0.0.1:7070.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/leasegate/leasegate/internal/buildinfo"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
	"github.com/leasegate/leasegate/queue"
)

// exitUsage is the exit status for invalid flags or configuration.
const exitUsage = 2

// usageError marks errors that should exit with exitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() {
	root := newRootCmd()
	if err := root.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "leasegate: %v\n", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is the exit status for an error of the command: exitUsage for
// a mistake in the flags, the environment's LEASEGATE_* or the files they
// name, which only changing them fixes; 1 for a failure of the
// environment (a port in use, a data directory held by another process,
// an etcd cluster that does not answer), which may pass.
func exitCode(err error) int {
	var ue usageError
	var ce *server.ConfigError
	if errors.As(err, &ue) || errors.As(err, &ce) {
		return exitUsage
	}
	return 1
}

func newRootCmd() *cobra.Command {
	cfg := server.DefaultConfig()
	var sec securityFlags
	var tf telemetryFlags
	var etcdFlags []string
	var logLevel, logFormat string
	var noLossWait bool // --no-loss-wait: cfg.Fleet.Queue.LossWait off
	cmd := &cobra.Command{
		Use:   "leasegate",
		Short: "Sharded lease-management gateway with fair queueing over etcd",
		Long: `leasegate grants named locks (leases) with fencing tokens over one or more etcd
clusters. Clients connect with Connect, gRPC, gRPC-Web or the REST JSON API.

With no --etcd flag it starts etcd embedded in the process, its data under --data-dir.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags()); err != nil {
				return usageError{err}
			}
			if err := applyConfigFile(cmd.Flags()); err != nil {
				return usageError{err}
			}
			clusters, err := parseClusters(etcdFlags)
			if err != nil {
				return usageError{err}
			}
			cfg.Clusters = clusters
			if err := sec.apply(&cfg); err != nil {
				return usageError{err}
			}
			log, err := newLogger(logLevel, logFormat, cmd.ErrOrStderr())
			if err != nil {
				return usageError{err}
			}
			cfg.Log = log
			cfg.Fleet.Queue.LossWait = !noLossWait
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			return serveWithTelemetry(cmd.Context(), cfg, log, tf)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.AddCommand(newShardsCmd())
	cmd.AddCommand(newIDKeysCmd())
	argsAreUsage(cmd)
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to serve Connect, gRPC, gRPC-Web and REST on")
	f.StringVar(&cfg.DebugListen, "debug-listen", "", fmt.Sprintf("address to serve the Go profiler (net/http/pprof) on, apart from the API; off when empty. "+
		"Loopback serves the local operator without credentials; any other address needs --auth-tokens or JWT auth and a bearer token with the operator role on every request. ?seconds= is capped at %d", server.MaxProfileSeconds))
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for embedded etcd data (unused with --etcd)")
	f.StringArrayVar(&etcdFlags, "etcd", nil, "an external etcd cluster as name=url1,url2 (repeat once per cluster); replaces the embedded one")
	f.IntVar(&cfg.EmbeddedShards, "shards", cfg.EmbeddedShards, "embedded etcd clusters to start when no --etcd is given (1 to 16)")
	f.StringVar(&cfg.EmbeddedEtcdListen, "embedded-etcd-listen", "", "loopback host:port (127.0.0.1:2379) on which the embedded etcd serves etcd clients such as etcdctl and leasegate shards, without credentials; shard-N on the port N above; empty: a free port picked at each start (unused with --etcd)")
	f.StringVar(&cfg.Prefix, "prefix", cfg.Prefix, "etcd key prefix for every key leasegate writes")
	f.DurationVar(&cfg.Gateway.DefaultTTL, "default-ttl", cfg.Gateway.DefaultTTL, "lease TTL when a request gives none")
	f.DurationVar(&cfg.Gateway.MaxWaitTimeout, "max-wait", cfg.Gateway.MaxWaitTimeout, "longest wait_timeout_ms a client may ask for")
	f.Int64Var(&cfg.Gateway.MaxBodyBytes, "max-body-bytes", cfg.Gateway.MaxBodyBytes, "largest request body or message (1 KiB to 16 MiB)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "bound on a graceful stop")
	f.IntVar(&cfg.Gateway.AuditMaxRecords, "audit-max-records", queue.DefaultAuditMaxRecords, "force-release audit records kept per tenant and shard (the oldest beyond are deleted)")
	f.DurationVar(&cfg.Gateway.AuditMaxAge, "audit-max-age", queue.DefaultAuditMaxAge, "how long a force-release audit record is kept")
	f.DurationVar(&cfg.Fleet.Queue.AttemptTTL, "attempt-ttl", cfg.Fleet.Queue.AttemptTTL, "how long a session waiter whose gateway stopped keeps its place (and can block its name): 2s to 5m, whole seconds")
	f.IntVar(&cfg.Fleet.Queue.LeasePool, "lease-pool", cfg.Fleet.Queue.LeasePool, "per-lock leases each engine keeps granted ahead of need, per TTL, and reuses after a release (0 disables)")
	f.DurationVar(&cfg.Fleet.Queue.MaxClockSkew, "max-clock-skew", cfg.Fleet.Queue.MaxClockSkew, "how far the clocks of the gateways over one etcd cluster may disagree: a lock-delay or loss wait another gateway stamped is waited out this much longer; 0 to 1m")
	f.BoolVar(&noLossWait, "no-loss-wait", !cfg.Fleet.Queue.LossWait, "free a name the moment its holder's key goes, even when it went without a release (a lapsed or early-revoked lease); by default such a name waits its holder's TTL, so that no two holders ever believe at once")
	f.DurationVar(&cfg.Fleet.Breaker.OpenTimeout, "breaker-open-timeout", cfg.Fleet.Breaker.OpenTimeout, "how long a cluster's tripped circuit breaker refuses calls before it lets a probe through (100ms to 1m); about the etcd election timeout")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", logAuto, "log format on stderr: text (key=value lines), json (one object a line), or auto: text when stderr is a terminal, json otherwise")
	addSecurityFlags(f, &cfg, &sec)
	addTelemetryFlags(f, &cfg, &tf)
	f.String(configFlag, "", "optional YAML or JSON file of flag values, keys = flag names (flags and LEASEGATE_* win over it)")
	showEnv(f)
	cmd.Version = buildinfo.Read().String()
	cmd.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	return cmd
}

// argsAreUsage makes the refusal of cmd's and its subcommands' arguments
// (an unknown command, a missing or extra argument) a usage error, as a
// bad flag is.
func argsAreUsage(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		argsAreUsage(sub)
	}
}

// parseClusters reads --etcd values: "name=url1,url2" or "url1,url2"
// (named etcd-0, etcd-1 … by position).
func parseClusters(vals []string) ([]server.Cluster, error) {
	var out []server.Cluster
	for i, v := range vals {
		name, urls, ok := strings.Cut(v, "=")
		if !ok {
			name, urls = fmt.Sprintf("etcd-%d", i), v
		}
		var eps []string
		for _, u := range strings.Split(urls, ",") {
			if u = strings.TrimSpace(u); u != "" {
				eps = append(eps, u)
			}
		}
		if len(eps) == 0 {
			return nil, fmt.Errorf("--etcd %q: no endpoints; want name=http://host:2379[,…]", v)
		}
		out = append(out, server.Cluster{Name: name, Endpoints: eps})
	}
	return out, nil
}

// The values of --log-format.
const (
	logText = "text"
	logJSON = "json"
	logAuto = "auto"
)

// newLogger is the gateway's logger on w at level, in format (logText,
// logJSON, or logAuto: text when w is a terminal).
func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	if format == logAuto {
		format = logJSON
		if isTerminal(w) {
			format = logText
		}
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler
	switch format {
	case logText:
		h = slog.NewTextHandler(w, opts)
	case logJSON:
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: want text, json or auto", format)
	}
	// Lines logged with a request's context carry its trace and span ids.
	return slog.New(telemetry.NewTraceHandler(h)), nil
}

// isTerminal reports whether w is a terminal: a file that is a character
// device. (/dev/null is one too; what it is given does not matter.)
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func serve(ctx context.Context, cfg server.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		log.Info("stopping: open waits end with a retryable code; held locks stay in etcd")
	case err := <-srv.Done():
		log.Error("serve loop ended", "err", err)
	}
	return srv.Shutdown(context.Background())
}
