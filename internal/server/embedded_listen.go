package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/leasegate/leasegate/internal/embedetcd"
	"github.com/leasegate/leasegate/shard"
)

// validateEmbeddedEtcdListen checks EmbeddedEtcdListen: a loopback
// address (the embedded etcd asks no credentials: anyone who reaches it
// can read and delete every lock), a port that leaves room for every
// embedded cluster, and embedded clusters to serve.
func (c Config) validateEmbeddedEtcdListen() error {
	if c.EmbeddedEtcdListen == "" {
		return nil
	}
	const flag = "--embedded-etcd-listen"
	if len(c.Clusters) > 0 {
		return fmt.Errorf("%s %q is for the embedded etcd, which --etcd replaces: leave one of them out", flag, c.EmbeddedEtcdListen)
	}
	host, port, err := net.SplitHostPort(c.EmbeddedEtcdListen)
	if err != nil {
		return fmt.Errorf("%s %q: want host:port on loopback, such as 127.0.0.1:2379", flag, c.EmbeddedEtcdListen)
	}
	ip := net.ParseIP(host)
	if !(ip != nil && ip.IsLoopback()) && !(host == "localhost" && isLoopback(c.EmbeddedEtcdListen)) {
		return fmt.Errorf("%s %q: the embedded etcd asks no credentials (anyone who reaches it can read and delete every lock), so it listens on loopback only: want 127.0.0.1:PORT, [::1]:PORT or localhost:PORT", flag, c.EmbeddedEtcdListen)
	}
	p, err := strconv.Atoi(port)
	if last := p + c.EmbeddedShards - 1; err != nil || p < 1 || last > 65535 {
		return fmt.Errorf("%s %q: want a port from 1 to %d (the %d embedded clusters serve on it and the ports above)", flag, c.EmbeddedEtcdListen, 65536-max(c.EmbeddedShards, 1), c.EmbeddedShards)
	}
	return nil
}

// embeddedEtcdAddrs are the client addresses of the embedded clusters,
// nil without EmbeddedEtcdListen (each picks a free port). Validate has
// checked EmbeddedEtcdListen.
func (c Config) embeddedEtcdAddrs() []string {
	if c.EmbeddedEtcdListen == "" {
		return nil
	}
	host, port, _ := net.SplitHostPort(c.EmbeddedEtcdListen)
	p, _ := strconv.Atoi(port)
	out := make([]string, c.EmbeddedShards)
	for i := range out {
		out[i] = net.JoinHostPort(host, strconv.Itoa(p+i))
	}
	return out
}

// checkEmbeddedEtcdListen binds each address and lets go of it, so that a
// port in use is reported before any etcd member starts.
func checkEmbeddedEtcdListen(addrs []string) error {
	var errs []error
	for i, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			errs = append(errs, fmt.Errorf("--embedded-etcd-listen: shard-%d's etcd client address %s: %w", i, a, err))
			continue
		}
		_ = ln.Close()
	}
	return errors.Join(errs...)
}

// logEmbeddedEtcdListen says where the embedded clusters serve etcd
// clients, and the operator command that reaches them all.
func logEmbeddedEtcdListen(log *slog.Logger, prefix string, clusters []Cluster) {
	var urls, flags []string
	for _, c := range clusters {
		urls = append(urls, c.Endpoints...)
		flags = append(flags, "--etcd "+c.Name+"="+strings.Join(c.Endpoints, ","))
	}
	cmd := "leasegate shards show " + strings.Join(flags, " ")
	if prefix != shard.DefaultPrefix {
		cmd += " --prefix " + prefix
	}
	log.Info("embedded etcd serves clients on loopback, without credentials",
		"urls", urls, "etcdctl", "etcdctl --endpoints="+clusters[0].Endpoints[0], "leasegate", cmd)
}

// freeAddrBut is a free loopback address (embedetcd.FreeAddr) that is none
// of taken: the peer address of an embedded member must not be the client
// address of another, which is free until that member starts.
func freeAddrBut(taken []string) (string, error) {
	var ports []string
	for _, t := range taken {
		_, p, _ := net.SplitHostPort(t)
		ports = append(ports, p)
	}
	for range len(taken) + 1 {
		a, err := embedetcd.FreeAddr()
		if err != nil {
			return "", err
		}
		if _, p, _ := net.SplitHostPort(a); !slices.Contains(ports, p) {
			return a, nil
		}
	}
	return "", errors.New("embedded etcd: no free peer address apart from the --embedded-etcd-listen ports")
}
