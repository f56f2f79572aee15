package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/leasegate/leasegate/internal/embedetcd"
)

// newEtcdMemberCmd is a hidden command that runs one member of a
// multi-member etcd cluster in its own process, so that fault-injection
// tests (loadtest/chaos) can kill, pause and restart members one by one.
// It prints "ready" on stdout once the member serves clients and runs
// until SIGINT or SIGTERM.
func newEtcdMemberCmd() *cobra.Command {
	var cfg embedetcd.MemberConfig
	cmd := &cobra.Command{
		Use:    "etcd-member",
		Short:  "Run one embedded member of a multi-member etcd cluster (for tests)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			srv, err := embedetcd.StartMember(cfg)
			if err != nil {
				return err
			}
			defer srv.Close()
			fmt.Fprintln(cmd.OutOrStdout(), "ready", srv.Endpoint())
			select {
			case <-ctx.Done():
				return nil
			case err := <-srv.Err():
				return fmt.Errorf("etcd member %q: %w", cfg.Name, err)
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "", "member name, as listed in --initial-cluster")
	f.StringVar(&cfg.Dir, "data-dir", "", "the member's data directory; existing data restarts the member")
	f.StringVar(&cfg.ClientAddr, "listen-client", "", "host:port to serve etcd clients on")
	f.StringVar(&cfg.PeerAddr, "listen-peer", "", "host:port to listen on for raft peers")
	f.StringVar(&cfg.AdvertisePeerAddr, "advertise-peer", "", "host:port peers dial to reach this member (default --listen-peer)")
	f.StringVar(&cfg.InitialCluster, "initial-cluster", "", "every member as name=http://host:port, comma separated")
	f.StringVar(&cfg.InitialClusterState, "initial-cluster-state", "new", "new or existing")
	f.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", "leasegate", "token that keeps different clusters apart")
	f.UintVar(&cfg.TickMs, "tick-ms", 100, "raft heartbeat interval in milliseconds")
	f.UintVar(&cfg.ElectionMs, "election-ms", 1000, "raft election timeout in milliseconds")
	f.BoolVar(&cfg.UnsafeNoFsync, "unsafe-no-fsync", false, "skip fsync (tests only: a killed process loses nothing, a crashed machine would)")
	f.StringVar(&cfg.LogLevel, "log-level", "error", "etcd's log level")
	return cmd
}
