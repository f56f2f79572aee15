// Command etcdmember runs one member of a multi-member etcd cluster in its
// own process, so that the chaos harness (loadtest/chaos) can kill, pause
// and restart members one by one. It prints "ready <endpoint>" on stdout
// once the member serves clients and runs until SIGINT or SIGTERM.
//
// It is test infrastructure, built by the harness like its other binaries;
// the leasegate server does not carry it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasegate/leasegate/internal/embedetcd"
)

// exitUsage is the exit status for invalid flags.
const exitUsage = 2

func main() {
	var cfg embedetcd.MemberConfig
	f := flag.NewFlagSet("etcdmember", flag.ExitOnError)
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
	_ = f.Parse(os.Args[1:]) // ExitOnError: a bad flag exits with status 2
	if f.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "etcdmember: unexpected arguments %q: want flags only\n", f.Args())
		os.Exit(exitUsage)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "etcdmember: %v\n", err)
		os.Exit(exitUsage)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "etcdmember: %v\n", err)
		os.Exit(1)
	}
}

// run serves the member until SIGINT or SIGTERM, or until etcd fails.
func run(cfg embedetcd.MemberConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := embedetcd.StartMember(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Println("ready", srv.Endpoint())
	select {
	case <-ctx.Done():
		return nil
	case err := <-srv.Err():
		return fmt.Errorf("etcd member %q: %w", cfg.Name, err)
	}
}
