//go:build linux

package chaos

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasegate/leasegate/internal/netfault"
)

// Gateway is one leasegate gateway process. Clients reach it through
// Front; it reaches each etcd member through a link of its own, so one
// gateway's links can fail while the other's work.
type Gateway struct {
	// Name is g0, g1, …
	Name string
	// Addr is where the process listens.
	Addr string
	// Front is the client→gateway link.
	Front *netfault.Link
	// Etcd are its gateway→member links, by member name.
	Etcd map[string]*netfault.Link

	h    *Harness
	mu   sync.Mutex
	proc *proc
}

func newGateway(h *Harness, name string) (*Gateway, error) {
	g := &Gateway{Name: name, h: h, Etcd: map[string]*netfault.Link{}}
	var err error
	if g.Addr, err = h.ports.addr(); err != nil {
		return nil, err
	}
	if g.Front, err = netfault.New(name+"-front", g.Addr); err != nil {
		return nil, err
	}
	h.addCloser(g.Front.Close)
	for _, c := range h.Clusters {
		for _, m := range c.Members {
			l, err := netfault.New(name+"->"+m.Name, m.ClientAddr)
			if err != nil {
				return nil, err
			}
			h.addCloser(l.Close)
			g.Etcd[m.Name] = l
		}
	}
	return g, g.Start()
}

// Start launches the process and waits until it answers /healthz.
func (g *Gateway) Start() error {
	args := []string{"--listen", g.Addr, "--log-level", "warn", "--shutdown-timeout", "2s",
		"--attempt-ttl", g.h.cfg.AttemptTTL.String()}
	for _, c := range g.h.Clusters {
		var urls []string
		for _, m := range c.Members {
			urls = append(urls, g.Etcd[m.Name].URL())
		}
		args = append(args, "--etcd", c.Name+"="+strings.Join(urls, ","))
	}
	p, err := startProc(g.Name, g.h.bin, args, childEnv(), filepath.Join(g.h.out, "logs", g.Name+".log"), nil)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.proc = p
	g.mu.Unlock()
	g.h.addCloser(p.kill)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.Addr+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !p.alive() {
			return fmt.Errorf("gateway %s exited at start: %v (see logs/%s.log)", g.Name, p.err, g.Name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gateway %s not healthy after 40s (see logs/%s.log)", g.Name, g.Name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops the gateway gracefully (SIGTERM: open waits end with
// SHUTTING_DOWN, in-flight calls get --shutdown-timeout) and waits for it
// to exit, killing it after 10 s. It returns when the process was reaped.
func (g *Gateway) Stop() time.Time {
	g.mu.Lock()
	p := g.proc
	g.mu.Unlock()
	if p == nil {
		return time.Now()
	}
	_ = p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.kill()
	}
	return time.Now()
}

// Kill SIGKILLs the gateway.
func (g *Gateway) Kill() {
	g.mu.Lock()
	p := g.proc
	g.mu.Unlock()
	if p != nil {
		p.kill()
	}
}
