// Package embedetcd starts a single-member etcd server inside the current
// process. The leasegate server uses it when no external etcd endpoints are
// configured, and tests use it (through internal/etcdtest) so that lock
// semantics are always exercised against a real etcd.
package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config describes one embedded member.
type Config struct {
	// Name is the member name; it also names the data directory. Default "default".
	Name string
	// Dir is the parent data directory. Required. A member directory
	// another member holds is refused at once with ErrDirInUse.
	Dir string
	// ClientAddr is the host:port clients connect to. Empty picks a free
	// loopback port.
	ClientAddr string
	// PeerAddr is the host:port for raft traffic. Empty picks a free loopback port.
	PeerAddr string
	// TickMs is the raft heartbeat interval. Default 100 ms (etcd's default).
	TickMs uint
	// ElectionMs is the election timeout. Default 1000 ms (etcd's default).
	// The minimum lease TTL etcd accepts is about 1.5 × ElectionMs.
	ElectionMs uint
	// StartTimeout bounds how long Start waits for the member to serve,
	// etcd's opening of its data included. Default 60 s.
	StartTimeout time.Duration
	// UnsafeNoFsync disables fsync: for tests only, never for data that matters.
	UnsafeNoFsync bool
	// LogLevel is etcd's own log level. Default "error".
	LogLevel string
	// ClientTLS, when its CertFile is set, makes the member serve clients
	// over TLS only: its Endpoint is then an https:// URL.
	ClientTLS ClientTLS
}

// ClientTLS is the TLS a member serves its clients with.
type ClientTLS struct {
	// CertFile and KeyFile are the member's PEM server certificate and key.
	CertFile, KeyFile string
	// ClientCAFile, when set, makes every client present a certificate
	// this PEM bundle signed (etcd's --client-cert-auth).
	ClientCAFile string
}

// Server is a running embedded member.
type Server struct {
	etcd     *embed.Etcd
	endpoint string
	lock     *DirLock // the data directory's, held while the member runs
}

// Start launches the member and blocks until it serves clients or
// StartTimeout passes: StartContext without an end of its own.
func Start(cfg Config) (*Server, error) { return StartContext(context.Background(), cfg) }

// StartContext launches the member and blocks until it serves clients,
// StartTimeout passes or ctx ends. A member whose database another
// program has locked is refused at once with ErrDatabaseInUse, naming the
// file and, where the system says, the process. If etcd's own start is
// still running when the time is up (it waits without end for a database
// locked after that check), StartContext returns and leaves it to finish
// in the background, holding the directory until it ends (startEtcd).
func StartContext(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedetcd: Dir is required")
	}
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	var err error
	if cfg.ClientAddr == "" {
		if cfg.ClientAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	if cfg.PeerAddr == "" {
		if cfg.PeerAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	return startMember(ctx, MemberConfig{
		Name:                cfg.Name,
		Dir:                 filepath.Join(cfg.Dir, cfg.Name+".etcd"),
		ClientAddr:          cfg.ClientAddr,
		PeerAddr:            cfg.PeerAddr,
		AdvertisePeerAddr:   cfg.PeerAddr,
		InitialCluster:      cfg.Name + "=" + (&url.URL{Scheme: "http", Host: cfg.PeerAddr}).String(),
		InitialClusterState: embed.ClusterStateFlagNew,
		InitialClusterToken: embed.NewConfig().InitialClusterToken,
		TickMs:              cfg.TickMs,
		ElectionMs:          cfg.ElectionMs,
		UnsafeNoFsync:       cfg.UnsafeNoFsync,
		LogLevel:            cfg.LogLevel,
		StartTimeout:        cfg.StartTimeout,
	}.withDefaults(), func(ec *embed.Config) {
		// Every acquire leaves a deleted key behind, and every read of a
		// name's queue walks its deleted keys until compaction removes
		// them: keep five minutes of history, compacting as it ages.
		ec.AutoCompactionMode = "periodic"
		ec.AutoCompactionRetention = "5m"
		if t := cfg.ClientTLS; t.CertFile != "" {
			ec.ClientTLSInfo = transport.TLSInfo{
				CertFile: t.CertFile, KeyFile: t.KeyFile,
				TrustedCAFile: t.ClientCAFile, ClientCertAuth: t.ClientCAFile != "",
			}
			for _, us := range [][]url.URL{ec.ListenClientUrls, ec.AdvertiseClientUrls} {
				for i := range us {
					us[i].Scheme = "https"
				}
			}
		}
	})
}

// Endpoint is the client URL of the member.
func (s *Server) Endpoint() string { return s.endpoint }

// Etcd exposes the underlying embedded server, for tests that inject faults.
func (s *Server) Etcd() *embed.Etcd { return s.etcd }

// Close stops the member and releases its ports and its data directory.
// It blocks until the member has shut down.
func (s *Server) Close() {
	s.etcd.Close()
	s.lock.Unlock()
}

// FreeAddr returns a loopback host:port that was free a moment ago and
// that this process has not handed out before. It picks below Linux's
// default ephemeral range (32768 and up), which is where every listener on
// port 0 and every outgoing connection gets its port: a member stopped and
// restarted on its address would otherwise find it taken by one of those
// in the meantime, in this process or another. Ports are handed out in
// sequence from an offset drawn from the process id, so two test
// processes running side by side walk different stretches of the range,
// and one process never hands out a port twice.
func FreeAddr() (string, error) {
	freePorts.Lock()
	defer freePorts.Unlock()
	if freePorts.next == 0 {
		freePorts.next = freePortLow + (os.Getpid()*7919)%(freePortHigh-freePortLow)
	}
	for range freePortHigh - freePortLow {
		port := freePorts.next
		freePorts.next++
		if freePorts.next >= freePortHigh {
			freePorts.next = freePortLow
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken: try the next
		}
		addr := l.Addr().String()
		l.Close()
		return addr, nil
	}
	return "", fmt.Errorf("embedetcd: no free port in [%d, %d)", freePortLow, freePortHigh)
}

// freePorts is where FreeAddr goes on from.
var freePorts struct {
	sync.Mutex
	next int
}

// The range FreeAddr draws ports from: below the ephemeral ports, and below
// the 12,000 ports under them that the chaos harness keeps for its own
// restarted processes (loadtest/chaos/ports.go), so test packages running
// side by side do not draw the same ones.
const (
	freePortLow  = 10000
	freePortHigh = 20000
)

// quietLogger is etcd's JSON logger at level, minus the errors etcd logs
// about its own listeners closing during a clean shutdown.
func quietLogger(level string) (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: log level %q: %w", level, err)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil
	l, err := zc.Build()
	if err != nil {
		return nil, err
	}
	return l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return shutdownNoiseFilter{c} })), nil
}

type shutdownNoiseFilter struct{ zapcore.Core }

func (f shutdownNoiseFilter) With(fields []zapcore.Field) zapcore.Core {
	return shutdownNoiseFilter{f.Core.With(fields)}
}

func (f shutdownNoiseFilter) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == "setting up serving from embedded etcd failed." {
		return ce
	}
	return f.Core.Check(e, ce)
}
