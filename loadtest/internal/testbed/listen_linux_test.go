package testbed

import (
	"net"
	"os"
	"slices"
	"testing"
)

func TestProcAddr(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"0100007F:0050", "127.0.0.1:80"},
		{"00000000:1F90", "0.0.0.0:8080"},
		{"00000000000000000000000001000000:0016", "[::1]:22"},
	} {
		if got, err := procAddr(c.in); err != nil || got != c.want {
			t.Errorf("procAddr(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// TestListenAddrs finds a listener this process opens, and not one it
// closed.
func TestListenAddrs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	defer l.Close()
	got, err := ListenAddrs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, l.Addr().String()) || slices.Contains(got, closed.Addr().String()) {
		t.Errorf("ListenAddrs = %q; want %s and not %s", got, l.Addr(), closed.Addr())
	}
}
