//go:build linux

package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
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
	go g.watchCrash(p)
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

// watchCrash records a crash of the gateway's process p — an exit the
// harness did not ask for (a panic, a fatal error) — with what its log
// says of it.
func (g *Gateway) watchCrash(p *proc) {
	if !p.unasked() {
		return
	}
	g.h.crashed(fmt.Sprintf("gateway %s exited on its own at %s: %v%s (see logs/%s.log)",
		g.Name, time.Now().Format(time.RFC3339Nano), p.err, crashLines(filepath.Join(g.h.out, "logs", g.Name+".log")), g.Name))
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
	_ = p.end(syscall.SIGTERM)
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

// crashLines is what the log at path says of its process's last exit:
// from the first "panic:" or "fatal error:" of its last run (the lines
// after its last "=== … start" line), the lines up to the first frame in
// leasegate's own code; empty when it says nothing.
func crashLines(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "=== ") && strings.Contains(lines[i], " start ") {
			lines = lines[i+1:]
			break
		}
	}
	var out []string
	own := false // the last line was a function of leasegate's own
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if len(out) == 0 && !strings.HasPrefix(line, "panic:") && !strings.HasPrefix(line, "fatal error:") || line == "" {
			continue
		}
		out = append(out, line)
		if own && strings.Contains(line, ".go:") || len(out) == 12 {
			break // that function's file and line
		}
		own = strings.HasPrefix(line, "github.com/leasegate/")
	}
	if len(out) == 0 {
		return ""
	}
	return ": " + strings.Join(out, " | ")
}
