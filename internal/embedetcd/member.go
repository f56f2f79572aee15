package embedetcd

import (
	"context"
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
	// serve, which needs a quorum of the cluster, etcd's opening of its
	// data included. Default 60 s.
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
	return startMember(context.Background(), cfg.withDefaults(), nil)
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

// startMember starts the member of cfg, which is complete, configured by
// embedConfig and tune, and waits until it serves clients, StartTimeout
// passes or ctx ends.
func startMember(ctx context.Context, cfg MemberConfig, tune func(*embed.Config)) (*Server, error) {
	ec, err := embedConfig(cfg, tune)
	if err != nil {
		return nil, err
	}
	lock, err := LockDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: member %q: %w", cfg.Name, err)
	}
	if err := checkDatabase(cfg.Dir); err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("embedetcd: member %q: %w", cfg.Name, err)
	}
	t := time.NewTimer(cfg.StartTimeout)
	defer t.Stop()
	e, err := startEtcd(ctx, ec, t.C, lock)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, fmt.Errorf("embedetcd: member %q: start given up: %w", cfg.Name, err)
	}
	if errors.Is(err, errStartExpired) {
		return nil, fmt.Errorf("embedetcd: member %q: etcd did not open its data within %s (is %s locked by another program?); the attempt goes on in the background and lets go of the directory when it ends", cfg.Name, cfg.StartTimeout, databasePath(cfg.Dir))
	}
	if err != nil {
		return nil, fmt.Errorf("embedetcd: start member %q: %w", cfg.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		lock.Unlock()
		return nil, fmt.Errorf("embedetcd: member %q failed: %w", cfg.Name, err)
	case <-ctx.Done():
		e.Server.Stop()
		e.Close()
		lock.Unlock()
		return nil, fmt.Errorf("embedetcd: member %q: start given up: %w", cfg.Name, ctx.Err())
	case <-t.C:
		e.Server.Stop()
		e.Close()
		lock.Unlock()
		return nil, fmt.Errorf("embedetcd: member %q not ready after %s (is a quorum of its cluster running?)", cfg.Name, cfg.StartTimeout)
	}
	return &Server{etcd: e, endpoint: ec.AdvertiseClientUrls[0].String(), lock: lock}, nil
}

// embedConfig is the embed configuration of the member of cfg, which is
// complete, with tune's adjustments: the one place either kind of member
// is configured.
func embedConfig(cfg MemberConfig, tune func(*embed.Config)) (*embed.Config, error) {
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
	return ec, nil
}

// errStartExpired is startEtcd's error when its time ran out.
var errStartExpired = errors.New("etcd start expired")

// startEtcd runs embed.StartEtcd on ec until it returns, expired fires
// or ctx ends, whichever comes first, holding lock, the member's
// directory lock. StartEtcd has no deadline of its own: it waits without
// end for the database's lock (checkDatabase tells only whether it was
// free a moment before). On expiry startEtcd returns errStartExpired at
// once (at the end of ctx, ctx's error) and leaves StartEtcd running in a
// goroutine, with the member's ports bound and lock held, so no other
// member of this process opens the directory meanwhile; when StartEtcd
// returns, that goroutine closes the member it started and lets go of
// lock. A StartEtcd that never returns keeps both until the process
// exits, which is what a gateway whose start failed does next. On an
// error of StartEtcd's own, lock is let go of.
func startEtcd(ctx context.Context, ec *embed.Config, expired <-chan time.Time, lock *DirLock) (*embed.Etcd, error) {
	return startWithin(ctx, func() (*embed.Etcd, error) { return embed.StartEtcd(ec) }, expired, lock.Unlock)
}

// startWithin is startEtcd with the start given: start runs in a
// goroutine of its own, and release is called once start has returned,
// unless its server is handed to the caller.
func startWithin(ctx context.Context, start func() (*embed.Etcd, error), expired <-chan time.Time, release func()) (*embed.Etcd, error) {
	type started struct {
		e   *embed.Etcd
		err error
	}
	done := make(chan started, 1)
	var err error
	go func() {
		e, err := start()
		done <- started{e, err}
	}()
	select {
	case s := <-done:
		if s.err != nil {
			release()
			return nil, s.err
		}
		return s.e, nil
	case <-expired:
		err = errStartExpired
	case <-ctx.Done():
		err = ctx.Err()
	}
	go func() {
		if s := <-done; s.e != nil {
			s.e.Close()
		}
		release()
	}()
	return nil, err
}

// Err delivers a fatal error of the running member (a listener that
// failed); it never delivers after Close.
func (s *Server) Err() <-chan error { return s.etcd.Err() }
