// Command fencing plays leasegate's fencing dance end to end on embedded
// etcd and an SQLite orders store:
//
//	go run ./examples/fencing [--ttl 2s] [--data-dir DIR]
//
// Client A, this program re-executed as a child process (the hidden
// fencing-client subcommand), acquires order:42 and is paused with SIGSTOP
// until its lease expires; client B, in this process, acquires the lock with
// a newer token and writes the order; A is resumed and writes with its old
// token, and the store refuses it. It exits 0 only if A's stale write was
// refused and the order ends as B wrote it.
//
// It lives outside cmd/leasegate so that the server binary does not link
// SQLite, the fencing library or the demo's client.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// exitUsage is the exit status for invalid flags.
const exitUsage = 2

// usageError marks errors that should exit with exitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() {
	if err := newFencingDemoCmd().Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "fencing: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(exitUsage)
		}
		os.Exit(1)
	}
}

// newFencingDemoCmd is the demo, with client A as its hidden subcommand.
func newFencingDemoCmd() *cobra.Command {
	cfg := defaultFencingDemoConfig()
	cmd := &cobra.Command{
		Use:   "fencing",
		Short: "Play the fencing dance: a paused client's stale write is refused by the orders store",
		Long: `Plays the fencing dance end to end on embedded etcd and an SQLite orders store:

  client A (a child process) acquires order:42 with token t and is paused with SIGSTOP;
  A's lease expires; client B acquires with token t' > t and writes the order;
  A is resumed with SIGCONT and, still believing it holds the lock, writes with t;
  the store refuses A's write because t < t'.

Exits 0 only if A's stale write was refused and the order ends as B wrote it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this program's binary to run client A: %w", err)
			}
			cfg.Executable = exe
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(contextOf(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			err = runFencingDemo(ctx, cfg, cmd.OutOrStdout())
			if err != nil && ctx.Err() != nil {
				return fmt.Errorf("interrupted, client A killed: %w", err)
			}
			return err
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the embedded etcd data (default: a temporary directory, removed afterwards)")
	f.DurationVar(&cfg.TTL, "ttl", cfg.TTL, fmt.Sprintf("lease TTL of both clients (%s to %s, whole seconds)", minDemoTTL, maxDemoTTL))
	cmd.AddCommand(newFencingClientCmd())
	return cmd
}

// newFencingClientCmd is the hidden `fencing fencing-client`: client A of
// the demo, run as a child process of the demo.
func newFencingClientCmd() *cobra.Command {
	var cfg fencingClientConfig
	cmd := &cobra.Command{
		Use:    "fencing-client",
		Short:  "Client A of the fencing demo (run by the demo, not by hand)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			return runFencingClient(contextOf(cmd), cfg, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Endpoint, "endpoint", "", "base URL of the gateway, e.g. http://127.0.0.1:7070")
	f.StringVar(&cfg.Order, "order", demoOrderID, "order id to write; the lock is order:<id>")
	f.StringVar(&cfg.DB, "db", "", "path of the SQLite orders database")
	f.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "lease TTL to ask for")
	return cmd
}

// contextOf returns the command's context, or Background when it has none.
func contextOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
