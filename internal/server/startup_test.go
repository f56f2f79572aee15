package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/embedetcd"
	"github.com/leasegate/leasegate/internal/server"
)

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startWithin runs server.Start, failing the test if it does not return
// within bound (a start that waits on something held never does). A
// server that started is stopped at cleanup.
func startWithin(t *testing.T, ctx context.Context, cfg server.Config, bound time.Duration) (*server.Server, error) {
	t.Helper()
	type result struct {
		srv *server.Server
		err error
	}
	done := make(chan result, 1)
	go func() {
		srv, err := server.Start(ctx, cfg)
		done <- result{srv, err}
	}()
	select {
	case r := <-done:
		if r.srv != nil {
			t.Cleanup(func() { _ = r.srv.Shutdown(context.Background()) })
		}
		return r.srv, r.err
	case <-time.After(bound):
		t.Fatalf("Start did not return within %s", bound)
		return nil, nil
	}
}

// embedded is a configuration of a gateway over n embedded clusters under
// dir, on addr.
func embedded(dir, addr string, n int) server.Config {
	cfg := server.DefaultConfig()
	cfg.Listen, cfg.DataDir, cfg.EmbeddedShards = addr, dir, n
	return cfg
}

// A Start that fails, at whatever stage, returns an error naming the cause
// (never a panic in its cleanup) and leaves nothing behind: its port is
// free again, every embedded member it had started is stopped (its
// directory can be locked), and the data directory is let go. An error of
// the configuration is a ConfigError; one of the environment is not.
func TestStartFailsCleanlyAtEveryStage(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	upperTenant := write("tokens-upper", "0123456789abcdef0123 Acme\n")
	notPEM := write("not-pem", "hello\n")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	deadEtcd := "http://" + freeAddr(t)

	type check func(t *testing.T, dir string)
	for _, tc := range []struct {
		name   string
		edit   func(c *server.Config, dir string)
		config bool     // want a ConfigError
		want   []string // in the message
		ctx    time.Duration
		after  check
	}{
		{name: "tenant with an upper-case letter in the tokens file", config: true,
			edit: func(c *server.Config, _ string) { c.Gateway.Auth.TokensFile = upperTenant },
			want: []string{upperTenant, "line 1", `tenant "Acme"`}},
		{name: "tokens file missing", config: true,
			edit: func(c *server.Config, dir string) { c.Gateway.Auth.TokensFile = filepath.Join(dir, "nope") },
			want: []string{"auth tokens file", "nope", "no such file"}},
		{name: "TLS certificate missing", config: true,
			edit: func(c *server.Config, dir string) {
				c.TLSCert, c.TLSKey = filepath.Join(dir, "cert"), filepath.Join(dir, "key")
			},
			want: []string{"--tls-cert", "no such file"}},
		{name: "TLS certificate not PEM", config: true,
			edit: func(c *server.Config, _ string) { c.TLSCert, c.TLSKey = notPEM, notPEM },
			want: []string{"--tls-cert", "PEM"}},
		{name: "client CA not PEM", config: true,
			edit: func(c *server.Config, dir string) {
				c.TLSCert, c.TLSKey, c.TLSClientCA = notPEM, notPEM, notPEM
			},
			want: []string{"--tls-cert"}},
		{name: "id keys file missing", config: true,
			edit: func(c *server.Config, dir string) { c.IDKeysFile = filepath.Join(dir, "keys") },
			want: []string{"id keys file", "keys"}},
		{name: "etcd CA missing", config: true,
			edit: func(c *server.Config, dir string) {
				c.Clusters = []server.Cluster{{Name: "x", Endpoints: []string{deadEtcd}}}
				c.EtcdTLS.CA = filepath.Join(dir, "ca")
			},
			want: []string{"--etcd-ca", "no such file"}},
		{name: "port in use",
			edit: func(c *server.Config, _ string) { c.Listen = busy.Addr().String() },
			want: []string{"listen on " + busy.Addr().String(), "address already in use"}},
		{name: "debug port in use",
			edit: func(c *server.Config, _ string) { c.DebugListen = busy.Addr().String() },
			want: []string{"debug listen on " + busy.Addr().String(), "address already in use"}},
		{name: "data directory under a file",
			edit: func(c *server.Config, _ string) { c.DataDir = filepath.Join(notPEM, "data") },
			want: []string{notPEM, "not a directory"}},
		{name: "second shard's directory held", // the first shard's member has started
			edit: func(c *server.Config, dir string) {
				c.EmbeddedShards = 2
				l, err := embedetcd.LockDir(filepath.Join(dir, "shard-1", "shard-1.etcd"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(l.Unlock)
			},
			want: []string{"shard-1", "data directory in use", fmt.Sprintf("process %d", os.Getpid()), "--data-dir"},
			after: func(t *testing.T, dir string) {
				l, err := embedetcd.LockDir(filepath.Join(dir, "shard-0", "shard-0.etcd"))
				if err != nil {
					t.Errorf("shard-0's member still holds its directory after the failed start: %v", err)
				}
				l.Unlock()
			}},
		{name: "home cluster does not answer", ctx: 2 * time.Second, // the port is bound by then
			edit: func(c *server.Config, _ string) {
				c.Clusters = []server.Cluster{{Name: "dead", Endpoints: []string{deadEtcd}}}
			},
			want: []string{`"dead"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			cfg := embedded(dir, freeAddr(t), 1)
			tc.edit(&cfg, dir)
			ctx := context.Background()
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			srv, err := startWithin(t, ctx, cfg, time.Minute)
			if err == nil {
				t.Fatalf("Start = %v, nil; want an error", srv)
			}
			var ce *server.ConfigError
			if got := errors.As(err, &ce); got != tc.config {
				t.Errorf("Start = %v: a ConfigError %v; want %v", err, got, tc.config)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start = %v; want it to name %q", err, w)
				}
			}
			// Nothing left behind.
			if cfg.Listen != busy.Addr().String() {
				ln, err := net.Listen("tcp", cfg.Listen)
				if err != nil {
					t.Errorf("the failed start left %s bound: %v", cfg.Listen, err)
				} else {
					ln.Close()
				}
			}
			if l, err := embedetcd.LockDir(cfg.DataDir); err == nil {
				l.Unlock()
			} else if errors.Is(err, embedetcd.ErrDirInUse) {
				t.Errorf("the failed start still holds %s: %v", cfg.DataDir, err)
			}
			if tc.after != nil {
				tc.after(t, dir)
			}
		})
	}
}

// A second gateway on the data directory of a running one is refused at
// once, naming the directory and the process that holds it, and the first
// one serves on.
func TestSecondGatewayOnADataDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	first, err := startWithin(t, context.Background(), embedded(dir, "127.0.0.1:0", 1), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = startWithin(t, context.Background(), embedded(dir, "127.0.0.1:0", 1), 10*time.Second)
	abs, _ := filepath.Abs(dir)
	if !errors.Is(err, embedetcd.ErrDirInUse) || !strings.Contains(err.Error(), abs) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("second gateway on %s = %v; want the directory in use, by process %d", abs, err, os.Getpid())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %s; want it at once", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := first.Engines()[0].CountAllLocks(ctx); err != nil {
		t.Fatalf("the first gateway's engine after the refusal: %v", err)
	}
}
