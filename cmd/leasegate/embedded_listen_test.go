package main

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/embedetcd"
	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/shard"
)

// freeLoopbackPorts returns a loopback address whose port and the n-1
// ports above it were free a moment ago.
func freeLoopbackPorts(t *testing.T, n int) string {
	t.Helper()
	for range 50 {
		addr, err := embedetcd.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		free := true
		for i := 1; i < n && free; i++ {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i)))
			if free = err == nil; free {
				ln.Close()
			}
		}
		if free {
			return addr
		}
	}
	t.Fatalf("no %d free consecutive loopback ports", n)
	return ""
}

// With --embedded-etcd-listen the embedded clusters of `go run
// ./cmd/leasegate` serve etcd clients at that address and the ports above
// it: a plain etcd client reads the gateway's shard map there, whose
// endpoints are those URLs, the start logs them, and `leasegate shards
// show` works against them while the gateway serves.
func TestEmbeddedEtcdListen(t *testing.T) {
	addr := freeLoopbackPorts(t, 2)
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	urls := []string{"http://" + addr, "http://" + net.JoinHostPort(host, strconv.Itoa(p+1))}
	b := serveInBackground(t, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"), "--shards", "2", "--embedded-etcd-listen", addr)
	b.serving(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, u := range urls {
		cli, err := etcdtest.NewClient(u)
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		if e, err := shard.ReadEpoch(ctx, cli, shard.DefaultPrefix); err != nil || e != shard.MinEpoch {
			t.Errorf("shard-%d's epoch read at %s = %d, %v; want %d", i, u, e, err, shard.MinEpoch)
		}
		if i > 0 {
			continue
		}
		snap, err := shard.NewStore(cli, shard.DefaultPrefix).Load(ctx)
		if err != nil {
			t.Fatalf("the shard map at %s: %v", u, err)
		}
		for j, c := range snap.Map.Clusters {
			if len(c.Endpoints) != 1 || c.Endpoints[0] != urls[j] {
				t.Errorf("stored map cluster %s endpoints = %v; want [%s]", c.Name, c.Endpoints, urls[j])
			}
		}
	}
	out, _, err := runRoot(t, "shards", "show", "-o", "json", "--etcd", "shard-0="+urls[0])
	var m shard.Map
	if err != nil || json.Unmarshal([]byte(out), &m) != nil || len(m.Clusters) != 2 {
		t.Errorf("shards show against the embedded etcd = %q, %v; want its map of two clusters", out, err)
	}
	logs := b.logs.String()
	for _, w := range append([]string{"etcdctl --endpoints=" + urls[0], "leasegate shards show --etcd shard-0=" + urls[0] + " --etcd shard-1=" + urls[1]}, urls...) {
		if !strings.Contains(logs, w) {
			t.Errorf("the start's log does not say %q:\n%s", w, logs)
		}
	}
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
}

// Without the flag the embedded etcd's port is picked at each start and
// not logged as a client URL.
func TestEmbeddedEtcdListenOff(t *testing.T) {
	b := serveInBackground(t, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"), "--shards", "1")
	b.serving(t)
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.logs.String(), "etcdctl") {
		t.Errorf("without --embedded-etcd-listen the log names a client URL:\n%s", b.logs)
	}
}
