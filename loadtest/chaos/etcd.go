//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasegate/leasegate/internal/netfault"
)

// Member is one etcd member process. Its peers reach it through Peer, a
// fault proxy, so that it can be blackholed; the harness's own clients
// reach it directly at ClientAddr.
type Member struct {
	// Cluster names the member's cluster.
	Cluster string
	// Name is the member name.
	Name string
	// ClientAddr is where it serves clients.
	ClientAddr string
	// PeerAddr is where it listens for peers.
	PeerAddr string
	// Peer is the proxy its peers dial.
	Peer *netfault.Link

	dir string
	h   *Harness

	mu   sync.Mutex
	proc *proc
}

// Endpoint is the member's client URL, reached without a proxy.
func (m *Member) Endpoint() string { return "http://" + m.ClientAddr }

// EtcdCluster is one etcd cluster of member processes.
type EtcdCluster struct {
	// Name is the cluster's name in the shard map.
	Name string
	// Members are its members.
	Members []*Member
	// Client reaches every member directly, for the harness's own reads,
	// watches and compactions.
	Client *clientv3.Client

	initial string
}

// Member returns the member called name.
func (c *EtcdCluster) Member(name string) *Member {
	for _, m := range c.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Endpoints are the members' direct client URLs.
func (c *EtcdCluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.Endpoint())
	}
	return out
}

func newEtcdCluster(h *Harness, name string, size int) (*EtcdCluster, error) {
	c := &EtcdCluster{Name: name}
	var initial []string
	for i := range size {
		m := &Member{Cluster: name, Name: fmt.Sprintf("%s-m%d", name, i), h: h}
		var err error
		if m.ClientAddr, err = h.ports.addr(); err != nil {
			return nil, err
		}
		if m.PeerAddr, err = h.ports.addr(); err != nil {
			return nil, err
		}
		if m.Peer, err = netfault.New(m.Name+"-peer", m.PeerAddr); err != nil {
			return nil, err
		}
		h.addCloser(m.Peer.Close)
		m.dir = filepath.Join(h.dataDir, m.Name)
		initial = append(initial, m.Name+"="+m.Peer.URL())
		c.Members = append(c.Members, m)
	}
	c.initial = strings.Join(initial, ",")
	h.setInitial(name, c.initial)
	for _, m := range c.Members {
		if err := m.start(); err != nil {
			return nil, err
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            c.Endpoints(),
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, err
	}
	c.Client = cli
	h.addCloser(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.awaitHealthy(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// start launches the member's process; with existing data it rejoins.
func (m *Member) start() error {
	if err := os.MkdirAll(filepath.Dir(m.dir), 0o700); err != nil {
		return err
	}
	c := m.h.clusterInitial(m.Cluster)
	args := []string{
		"--name", m.Name, "--data-dir", m.dir,
		"--listen-client", m.ClientAddr, "--listen-peer", m.PeerAddr, "--advertise-peer", m.Peer.Addr(),
		"--initial-cluster", c, "--initial-cluster-state", "new", "--initial-cluster-token", m.Cluster,
		"--tick-ms", fmt.Sprint(m.h.cfg.TickMs), "--election-ms", fmt.Sprint(m.h.cfg.ElectionMs),
		"--unsafe-no-fsync", "--log-level", "warn",
	}
	p, err := startProc(m.Name, m.h.member, args, childEnv(), filepath.Join(m.h.out, "logs", m.Name+".log"), nil)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
	m.h.addCloser(p.kill)
	return nil
}

// Kill SIGKILLs the member.
func (m *Member) Kill() {
	if p := m.current(); p != nil {
		p.kill()
	}
}

// Restart starts a killed member again on its data.
func (m *Member) Restart() error {
	if p := m.current(); p != nil && p.alive() {
		return fmt.Errorf("member %s is still running", m.Name)
	}
	return m.start()
}

// Pause SIGSTOPs the member; Resume continues it.
func (m *Member) Pause() error { return m.current().pause() }

// Resume continues a paused member.
func (m *Member) Resume() error { return m.current().resume() }

func (m *Member) current() *proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc
}

// Alive reports whether the member's process runs.
func (m *Member) Alive() bool {
	p := m.current()
	return p != nil && p.alive()
}

// Leader returns the member every reachable member names as leader.
func (c *EtcdCluster) Leader(ctx context.Context) (*Member, error) {
	for _, m := range c.Members {
		if !m.Alive() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.Client.Status(sctx, m.Endpoint())
		cancel()
		if err != nil || st.Leader == 0 {
			continue
		}
		for _, l := range c.Members {
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			ls, err := c.Client.Status(lctx, l.Endpoint())
			cancel()
			if err == nil && ls.Header.MemberId == st.Leader {
				return l, nil
			}
		}
	}
	return nil, fmt.Errorf("cluster %s has no leader that answers", c.Name)
}

// awaitHealthy waits until every member answers a linearizable read and a
// leader is known.
func (c *EtcdCluster) awaitHealthy(ctx context.Context) error {
	var last error
	for ctx.Err() == nil {
		last = nil
		for _, m := range c.Members {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.Client.Status(rctx, m.Endpoint())
			cancel()
			if err != nil {
				last = fmt.Errorf("member %s: %w", m.Name, err)
				break
			}
		}
		if last == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.Client.Get(rctx, "/leasegate-chaos/health")
			cancel()
			if err == nil {
				if _, err := c.Leader(ctx); err == nil {
					return nil
				}
			}
			last = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(fmt.Errorf("cluster %s not healthy", c.Name), last, ctx.Err())
}
