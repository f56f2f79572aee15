package netfault

import (
	"io"
	"net"
	"testing"
	"time"
)

// startEcho runs a TCP echo server until the test ends.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echoLink puts a Link in front of an echo server and dials through it;
// both end with the test.
func echoLink(t *testing.T) (*Link, net.Conn) {
	t.Helper()
	l, err := New("echo", startEcho(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l, dial(t, l.Addr())
}

func readFull(c net.Conn, buf []byte) (int, error) { return io.ReadFull(c, buf) }

func TestLinkFaults(t *testing.T) {
	// Blackhole holds bytes back and delivers them on heal; nothing is lost.
	l, c := echoLink(t)
	l.Set(Fault{Blackhole: true})
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 4)
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("read %q through a blackhole", buf[:n])
	}
	l.Set(Fault{})
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := readFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("after heal read %q, %v; want the held bytes \"ping\"", buf, err)
	}
}

func TestReplyDelayHoldsOnlyReplies(t *testing.T) {
	l, c := echoLink(t)
	l.Set(Fault{ReplyDelay: 300 * time.Millisecond})
	start := time.Now()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := readFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v; want \"ping\"", buf, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("the reply came after %s; want at least the 300ms reply delay", d)
	}
}
