//go:build linux

package chaos

import (
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/leasegate/leasegate/internal/embedetcd"
)

// ports hands out loopback addresses for the processes the harness
// restarts on the same address (etcd members, gateways). They come from
// just below the kernel's ephemeral port range: a port from inside it,
// free when picked, can be taken before its process binds it (or while the
// process is down) by any listener on port 0 — the fault proxies — or any
// outgoing connection, and the member then fails to start.
type ports struct {
	mu     sync.Mutex
	lo, hi int // [lo, hi)
	used   map[int]bool
}

func newPorts() *ports {
	p := &ports{used: map[int]bool{}}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if low, err := strconv.Atoi(f[0]); err == nil && low > 4096 {
			p.lo, p.hi = max(1024, low-12000), low
		}
	}
	return p
}

// addr returns a free loopback address no other caller of addr got.
func (p *ports) addr() (string, error) {
	if p.hi == 0 {
		return embedetcd.FreeAddr()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for range 1000 {
		port := p.lo + mrand.IntN(p.hi-p.lo)
		if p.used[port] {
			continue
		}
		a := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", a)
		if err != nil {
			continue
		}
		l.Close()
		p.used[port] = true
		return a, nil
	}
	return "", fmt.Errorf("chaos: no free port in %d to %d", p.lo, p.hi)
}
