package server

import (
	"net"
	"testing"
)

// "localhost" is whatever the resolver says it is: a name counts as
// loopback only if every address it resolves to is one.
func TestLoopbackNamesAreResolved(t *testing.T) {
	// Not parallel: it replaces the package variable lookupIP.
	defer func(f func(string) ([]net.IP, error)) { lookupIP = f }(lookupIP)
	answers := map[string][]net.IP{
		"localhost":    {net.ParseIP("10.0.0.7")}, // a hostile or broken resolver
		"loop.example": {net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		"mixed":        {net.ParseIP("127.0.0.1"), net.ParseIP("192.0.2.1")},
	}
	lookupIP = func(host string) ([]net.IP, error) {
		if ips, ok := answers[host]; ok {
			return ips, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	for addr, want := range map[string]bool{
		"localhost:7070":    false,
		"loop.example:7070": true,
		"mixed:7070":        false,
		"nowhere:7070":      false,
		"127.0.0.1:7070":    true,
		"[::1]:7070":        true,
		":7070":             false,
		"0.0.0.0:7070":      false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v; want %v", addr, got, want)
		}
	}
	cfg := DefaultConfig()
	cfg.Listen = "localhost:7070"
	cfg.Clusters = []Cluster{{Name: "c", Endpoints: []string{"http://127.0.0.1:2379"}}}
	if err := cfg.Validate(); err == nil {
		t.Error(`a config listening on a "localhost" that resolves elsewhere, without auth, validates; want it refused`)
	}
}
