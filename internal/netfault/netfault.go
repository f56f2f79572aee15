// Package netfault is a loopback TCP fault proxy for tests and the chaos
// harness: it forwards one network link and can blackhole, delay, drop or
// swallow the replies of its traffic on demand.
package netfault

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Link is a TCP fault proxy for one network link: it listens on a loopback
// port and forwards every connection to target, and can blackhole, delay or
// drop the traffic of that link on demand.
//
// It is this package's own code rather than etcd's pkg/proxy because that
// one listens on every interface (the harness must stay on loopback) and
// stops accepting once sixteen dial errors go unread, which a link to a
// killed member produces quickly.
type Link struct {
	name   string
	target string
	ln     net.Listener

	mu     sync.Mutex
	fault  Fault
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Fault is the fault a Link applies to every chunk it forwards, in both
// directions. The zero value forwards untouched.
//
// No fault loses bytes inside a connection that survives: TCP never does,
// and a proxy that did would corrupt HTTP/2 framing and leave streams
// stalled in ways no real network produces.
type Fault struct {
	// Blackhole holds every byte back, both ways; connections stay open
	// and silent, as across a partition, and what was held is delivered
	// when the fault is healed, as TCP's retransmissions would.
	Blackhole bool
	// LoseReplies holds back what the target sends: requests arrive and
	// take effect, their answers do not. Healing it cuts every connection,
	// so the held answers are never delivered.
	LoseReplies bool
	// Delay holds each chunk back this long, ± Jitter, keeping order.
	Delay, Jitter time.Duration
	// ReplyDelay holds back only what the target sends, this long more.
	ReplyDelay time.Duration
	// DropRate is the probability that a chunk is lost. TCP cannot lose
	// bytes silently, so a lost chunk cuts its connection, as a reset after
	// retransmissions fail would.
	DropRate float64
}

// New listens on a fresh loopback port and forwards to target.
func New(name, target string) (*Link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Link{name: name, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the host:port clients dial instead of the target.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// URL is http://Addr.
func (l *Link) URL() string { return "http://" + l.Addr() }

// Set replaces the link's fault; Fault{} heals it.
func (l *Link) Set(f Fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fault.LoseReplies && !f.LoseReplies {
		for c := range l.conns {
			c.Close()
		}
	}
	l.fault = f
}

// holding reports whether chunks in the given direction are held back.
func (l *Link) holding(reply bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.closed && (l.fault.Blackhole || reply && l.fault.LoseReplies)
}

func (l *Link) current() Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fault
}

// Close stops listening and cuts every connection; it blocks until the
// forwarding goroutines have ended.
func (l *Link) Close() {
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.ln.Close()
	l.wg.Wait()
}

func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		in, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !l.track(in) {
			continue
		}
		l.wg.Add(1)
		go l.serve(in)
	}
}

// serve dials the target for one accepted connection and pumps both ways.
func (l *Link) serve(in net.Conn) {
	defer l.wg.Done()
	defer l.untrack(in)
	out, err := net.DialTimeout("tcp", l.target, 3*time.Second)
	if err != nil {
		return // the target is down: the client sees a closed connection
	}
	if !l.track(out) {
		return
	}
	defer l.untrack(out)
	done := make(chan struct{}, 2)
	go func() { l.pump(out, in, false); done <- struct{}{} }()
	go func() { l.pump(in, out, true); done <- struct{}{} }()
	<-done
	in.Close()
	out.Close()
	<-done
}

type chunk struct {
	due  time.Time
	data []byte
}

// pump copies src to dst through the link's fault. A reader goroutine
// stamps each chunk with its due time so that a delay does not compound
// across chunks; the writer keeps their order.
func (l *Link) pump(dst, src net.Conn, reply bool) {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				f := l.current()
				switch {
				case f.DropRate > 0 && rand.Float64() < f.DropRate:
					src.Close()
					dst.Close()
					return
				default:
					d := f.Delay
					if reply {
						d += f.ReplyDelay
					}
					if f.Jitter > 0 {
						d += time.Duration(rand.Int64N(int64(2*f.Jitter))) - f.Jitter
					}
					q <- chunk{due: time.Now().Add(max(d, 0)), data: append([]byte(nil), buf[:n]...)}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		for l.holding(reply) {
			time.Sleep(10 * time.Millisecond)
		}
		if w := time.Until(c.due); w > 0 {
			time.Sleep(w)
		}
		if _, err := dst.Write(c.data); err != nil {
			src.Close()
			for range q { // let the reader finish
			}
			return
		}
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
