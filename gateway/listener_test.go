package gateway_test

import (
	"net"
	"testing"
	"time"

	"github.com/leasegate/leasegate/gateway"
)

// accepted reports whether the listener kept a new connection: one over a
// cap is closed as soon as it is accepted, which the client sees as EOF.
func accepted(t *testing.T, addr string) (net.Conn, bool) {
	t.Helper()
	return acceptedFrom(t, "127.0.0.1", addr)
}

// acceptedFrom is accepted for a connection from the loopback address ip.
func acceptedFrom(t *testing.T, ip, addr string) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			_ = c.SetReadDeadline(time.Time{})
			return c, true // still open: accepted and kept
		}
	}
	c.Close()
	return nil, false
}

func TestLimitListenerCapsConnections(t *testing.T) {
	// Not parallel: a connection counts as kept when a 300 ms read times
	// out rather than ending, a judgement that load beside it would blur.
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := gateway.LimitListener(raw, 3, 2)
	defer ln.Close()
	server := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			server <- c // held open, like a live client's
		}
	}()
	addr := raw.Addr().String()
	c1, ok1 := accepted(t, addr)
	c2, ok2 := accepted(t, addr)
	if !ok1 || !ok2 {
		t.Fatal("the first two connections from one address were not kept")
	}
	if _, ok := accepted(t, addr); ok {
		t.Fatal("a third connection from one address was kept under a cap of 2")
	}
	c1.Close()
	// The gateway frees the slot when it closes its side (as the HTTP
	// server does once the client has gone).
	(<-server).Close()
	c3, ok := accepted(t, addr)
	if !ok {
		t.Fatal("a connection after one closed was not kept")
	}
	// Two connections from 127.0.0.1 are open; the total cap is 3, so one
	// more from another address is kept and the next is not.
	c4, ok := acceptedFrom(t, "127.0.0.2", addr)
	if !ok {
		t.Fatal("a first connection from another address was not kept under a total cap of 3")
	}
	if _, ok := acceptedFrom(t, "127.0.0.3", addr); ok {
		t.Fatal("a fourth connection in all was kept under a total cap of 3")
	}
	c2.Close()
	c3.Close()
	c4.Close()
}
