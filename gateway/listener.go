package gateway

import (
	"net"
	"sync"
)

// LimitListener caps the connections a listener holds open: at most total
// in all and at most perIP from one remote address (0 disables either). A
// connection over a cap is closed as soon as it is accepted, so a client
// that opens connections without end pins neither memory nor goroutines.
func LimitListener(ln net.Listener, total, perIP int) net.Listener {
	return &limitListener{Listener: ln, total: total, perIP: perIP, byIP: map[string]int{}}
}

type limitListener struct {
	net.Listener
	total, perIP int

	mu   sync.Mutex
	open int
	byIP map[string]int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		over := l.total > 0 && l.open >= l.total || l.perIP > 0 && l.byIP[ip] >= l.perIP
		if !over {
			l.open++
			l.byIP[ip]++
		}
		l.mu.Unlock()
		if over {
			_ = c.Close()
			continue
		}
		return &limitConn{Conn: c, l: l, ip: ip}, nil
	}
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

type limitConn struct {
	net.Conn
	l    *limitListener
	ip   string
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}
