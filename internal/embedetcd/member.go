package embedetcd

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// MemberConfig describes one member of a multi-member cluster. Unlike
// Config, every address is explicit: the members of one cluster must agree
// on each other's peer URLs before any of them starts.
type MemberConfig struct {
	// Name is the member name, as it appears in InitialCluster. Required.
	Name string
	// Dir is the member's data directory, used as is. Required. A directory
	// another member holds, in this process or another, is refused at once
	// (ErrDirInUse, naming the holder's process id). A directory
	// that already holds data restarts the member; InitialCluster and
	// InitialClusterState are then ignored by etcd.
	Dir string
	// ClientAddr is the host:port the member serves clients on. Required.
	ClientAddr string
	// PeerAddr is the host:port the member listens on for raft traffic.
	// Required.
	PeerAddr string
	// AdvertisePeerAddr is the host:port the other members dial to reach this
	// one; it must be this member's entry in InitialCluster. Default
	// PeerAddr. A different value puts something (a fault proxy) between
	// the member and its peers.
	AdvertisePeerAddr string
	// InitialCluster lists every member as name=http://host:port, comma
	// separated, with their advertised peer addresses. Required.
	InitialCluster string
	// InitialClusterState is "new" when the cluster is bootstrapped or
	// "existing" when the member joins a running cluster. Default "new".
	InitialClusterState string
	// InitialClusterToken keeps members of different clusters apart.
	// Default "leasegate".
	InitialClusterToken string
	// TickMs is the raft heartbeat interval. Default 100 ms.
	TickMs uint
	// ElectionMs is the election timeout. Default 1000 ms.
	ElectionMs uint
	// UnsafeNoFsync disables fsync. A killed process loses nothing by it
	// (the page cache survives the process); a crashed machine would.
	UnsafeNoFsync bool
	// LogLevel is etcd's own log level. Default "error".
	LogLevel string
	// StartTimeout bounds how long StartMember waits for the member to
	// serve, which needs a quorum of the cluster. Default 60 s.
	StartTimeout time.Duration
}

// Validate reports the first missing or malformed field.
func (c MemberConfig) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("embedetcd: member Name is empty")
	case c.Dir == "":
		return errors.New("embedetcd: member Dir is empty")
	case c.ClientAddr == "":
		return errors.New("embedetcd: member ClientAddr is empty; want host:port")
	case c.PeerAddr == "":
		return errors.New("embedetcd: member PeerAddr is empty; want host:port")
	case c.InitialCluster == "":
		return errors.New("embedetcd: member InitialCluster is empty; want name=http://host:port,…")
	case c.InitialClusterState != "" && c.InitialClusterState != embed.ClusterStateFlagNew &&
		c.InitialClusterState != embed.ClusterStateFlagExisting:
		return fmt.Errorf("embedetcd: member InitialClusterState %q: want %q or %q",
			c.InitialClusterState, embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting)
	}
	return nil
}

// StartMember launches one member of a multi-member cluster and blocks until
// it serves clients (which needs a quorum of its cluster) or StartTimeout
// passes. Start the other members concurrently, from other processes or
// goroutines.
func StartMember(cfg MemberConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return startMember(cfg.withDefaults(), nil)
}

// withDefaults fills the fields left empty with their documented defaults.
func (c MemberConfig) withDefaults() MemberConfig {
	if c.AdvertisePeerAddr == "" {
		c.AdvertisePeerAddr = c.PeerAddr
	}
	if c.InitialClusterState == "" {
		c.InitialClusterState = embed.ClusterStateFlagNew
	}
	if c.InitialClusterToken == "" {
		c.InitialClusterToken = "leasegate"
	}
	if c.LogLevel == "" {
		c.LogLevel = "error"
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 60 * time.Second
	}
	return c
}

// startMember builds the embed configuration of a member whose cfg is
// complete, lets tune adjust it, starts the member and waits until it
// serves clients: the one place either kind of member is configured.
func startMember(cfg MemberConfig, tune func(*embed.Config)) (*Server, error) {
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.LogLevel = cfg.LogLevel
	logger, err := quietLogger(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	if cfg.TickMs != 0 {
		ec.TickMs = cfg.TickMs
	}
	if cfg.ElectionMs != 0 {
		ec.ElectionMs = cfg.ElectionMs
	}
	curl := url.URL{Scheme: "http", Host: cfg.ClientAddr}
	ec.ListenClientUrls = []url.URL{curl}
	ec.AdvertiseClientUrls = []url.URL{curl}
	ec.ListenPeerUrls = []url.URL{{Scheme: "http", Host: cfg.PeerAddr}}
	ec.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: cfg.AdvertisePeerAddr}}
	ec.InitialCluster = cfg.InitialCluster
	ec.ClusterState = cfg.InitialClusterState
	ec.InitialClusterToken = cfg.InitialClusterToken
	// Metrics of an embedded member are not served on a port of their own.
	ec.ListenMetricsUrls = nil
	if tune != nil {
		tune(ec)
	}

	lock, err := LockDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: member %q: %w", cfg.Name, err)
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("embedetcd: start member %q: %w", cfg.Name, err)
	}
	t := time.NewTimer(cfg.StartTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		lock.Unlock()
		return nil, fmt.Errorf("embedetcd: member %q failed: %w", cfg.Name, err)
	case <-t.C:
		e.Server.Stop()
		e.Close()
		lock.Unlock()
		return nil, fmt.Errorf("embedetcd: member %q not ready after %s (is a quorum of its cluster running?)", cfg.Name, cfg.StartTimeout)
	}
	return &Server{etcd: e, endpoint: curl.String(), lock: lock}, nil
}

// Err delivers a fatal error of the running member (a listener that
// failed); it never delivers after Close.
func (s *Server) Err() <-chan error { return s.etcd.Err() }
