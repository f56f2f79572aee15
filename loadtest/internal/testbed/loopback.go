package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// ErrNotLoopback is returned for a target outside the loopback range: the
// load test only ever sends traffic to this machine.
var ErrNotLoopback = errors.New("not a loopback address")

// CheckURL accepts http:// URLs whose host is a loopback address, or a name
// (such as localhost) that resolves only to loopback addresses.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("endpoint %q: want an http:// URL such as http://127.0.0.1:7070", raw)
	}
	if err := CheckHost(u.Hostname()); err != nil {
		return fmt.Errorf("endpoint %q: %w", raw, err)
	}
	return nil
}

// CheckHost accepts a loopback IP, or a name that resolves only to them.
func CheckHost(host string) error {
	if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil {
		if !ip.IsLoopback() {
			return fmt.Errorf("host %s: %w (only 127.0.0.0/8 and ::1 are allowed)", host, ErrNotLoopback)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("host %s does not resolve: %w", host, ErrNotLoopback)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return fmt.Errorf("host %s resolves to %s: %w", host, a.IP, ErrNotLoopback)
		}
	}
	return nil
}
