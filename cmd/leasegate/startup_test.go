package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/server"
)

// runFor runs the leasegate command in-process with args, failing the test
// if it does not end within bound, and returns its error and the exit
// status main would give it.
func runFor(t *testing.T, bound time.Duration, args ...string) (error, int) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _, err := runRoot(t, args...)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			return nil, 0
		}
		return err, exitCode(err)
	case <-time.After(bound):
		t.Fatalf("leasegate %s did not end within %s", strings.Join(args, " "), bound)
		return nil, 0
	}
}

// Every way a newcomer's first start can go wrong — a bad flag, a bad or
// missing file, a port in use, a data directory that cannot be used — ends
// the command at once with an error that names the problem, and exit
// status 2 for what only changing the configuration fixes, 1 for the
// environment. None panics, none hangs.
func TestStartupErrorsNameTheirCause(t *testing.T) {
	tmp := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(tmp, "missing")
	upper := write("tokens", "0123456789abcdef0123 Acme\n")
	notPEM := write("cert.pem", "not a certificate\n")
	badYAML := write("bad.yaml", "listen: [\n")
	unknownKey := write("typo.yaml", "lisen: 127.0.0.1:1\n")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"port in use", []string{"--listen", busy.Addr().String()}, 1, []string{busy.Addr().String(), "address already in use"}},
		{"debug port in use", []string{"--debug-listen", busy.Addr().String()}, 1, []string{"debug listen", "address already in use"}},
		{"upper-case tenant in --auth-tokens", []string{"--auth-tokens", upper}, 2, []string{upper, `tenant "Acme"`, "a-z"}},
		{"missing --auth-tokens", []string{"--auth-tokens", missing}, 2, []string{"auth tokens file", missing}},
		{"missing --tls-cert", []string{"--tls-cert", missing, "--tls-key", missing}, 2, []string{"--tls-cert", missing}},
		{"--tls-cert not PEM", []string{"--tls-cert", notPEM, "--tls-key", notPEM}, 2, []string{"--tls-cert", "PEM"}},
		{"--tls-cert without --tls-key", []string{"--tls-cert", notPEM}, 2, []string{"--tls-key"}},
		{"missing --id-keys-file", []string{"--id-keys-file", missing}, 2, []string{"id keys file", missing}},
		{"missing --jwt-keys", []string{"--jwt-keys", missing, "--jwt-issuer", "i", "--jwt-audience", "a"}, 2, []string{missing}},
		{"missing --tenant-policy", []string{"--tenant-policy", missing}, 2, []string{"--tenant-policy", missing}},
		{"missing --etcd-ca", []string{"--etcd", "a=http://127.0.0.1:1", "--etcd-ca", missing}, 2, []string{"--etcd-ca", missing}},
		{"missing --config", []string{"--config", missing}, 2, []string{"config file", missing}},
		{"malformed --config", []string{"--config", badYAML}, 2, []string{"config file", badYAML}},
		{"unknown key in --config", []string{"--config", unknownKey}, 2, []string{`unknown key "lisen"`}},
		{"bad duration", []string{"--default-ttl", "banana"}, 2, []string{"--default-ttl", "banana"}},
		{"TTL out of range", []string{"--default-ttl", "1ms"}, 2, []string{"DefaultTTL"}},
		{"bad listen address", []string{"--listen", "7070"}, 2, []string{`"7070"`, "host:port"}},
		{"no shards", []string{"--shards", "0"}, 2, []string{"shards 0", "1 to 16"}},
		{"bad log level", []string{"--log-level", "loud"}, 2, []string{`"loud"`}},
		{"bad --etcd", []string{"--etcd", "a="}, 2, []string{"--etcd", "no endpoints"}},
		{"data directory under a file", []string{"--data-dir", filepath.Join(notPEM, "data")}, 1, []string{notPEM, "not a directory"}},
		{"stray argument", []string{"serve"}, 2, []string{"serve"}},
		{"bad log format", []string{"--log-format", "xml"}, 2, []string{`--log-format "xml"`, "text, json or auto"}},
		{"embedded etcd on every interface", []string{"--embedded-etcd-listen", "0.0.0.0:2379"}, 2, []string{`--embedded-etcd-listen "0.0.0.0:2379"`, "loopback only"}},
		{"embedded etcd on no host", []string{"--embedded-etcd-listen", ":2379"}, 2, []string{`--embedded-etcd-listen ":2379"`, "loopback only"}},
		{"embedded etcd on a remote address", []string{"--embedded-etcd-listen", "192.0.2.1:2379"}, 2, []string{`--embedded-etcd-listen "192.0.2.1:2379"`, "loopback only"}},
		{"embedded etcd on an IPv6 wildcard", []string{"--embedded-etcd-listen", "[::]:2379"}, 2, []string{`--embedded-etcd-listen "[::]:2379"`, "loopback only"}},
		{"embedded etcd without a port", []string{"--embedded-etcd-listen", "127.0.0.1"}, 2, []string{`--embedded-etcd-listen "127.0.0.1"`, "host:port"}},
		{"embedded etcd ports past 65535", []string{"--shards", "2", "--embedded-etcd-listen", "127.0.0.1:65535"}, 2, []string{`--embedded-etcd-listen "127.0.0.1:65535"`, "1 to 65534"}},
		{"embedded etcd listen with --etcd", []string{"--etcd", "a=http://127.0.0.1:1", "--embedded-etcd-listen", "127.0.0.1:2379"}, 2, []string{"--embedded-etcd-listen", "--etcd"}},
		{"root key prefix", []string{"--prefix", "/"}, 2, []string{`key prefix "/"`, "/leasegate"}},
		{"key prefix without a slash", []string{"--prefix", "leasegate"}, 2, []string{`key prefix "leasegate"`}},
		{"embedded etcd port in use", []string{"--embedded-etcd-listen", busy.Addr().String()}, 1, []string{"--embedded-etcd-listen", busy.Addr().String(), "address already in use"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"), "--shards", "1"}, tc.args...)
			err, code := runFor(t, 30*time.Second, args...)
			if err == nil {
				t.Fatalf("leasegate %s started; want it refused", strings.Join(tc.args, " "))
			}
			if code != tc.code {
				t.Errorf("leasegate %s: exit %d (%v); want %d", strings.Join(tc.args, " "), code, err, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("leasegate %s: %v; want the message to name %q", strings.Join(tc.args, " "), err, w)
				}
			}
		})
	}
}

// The README's command run twice: the second refuses at once, naming the
// data directory and the process that holds it, with status 1.
func TestSecondGatewayOnTheDataDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cfg := server.DefaultConfig()
	cfg.Listen, cfg.DataDir, cfg.EmbeddedShards = "127.0.0.1:0", dir, 1
	first, err := server.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Shutdown(context.Background()) }()
	start := time.Now()
	err, code := runFor(t, 10*time.Second, "--listen", "127.0.0.1:0", "--data-dir", dir, "--shards", "1")
	abs, _ := filepath.Abs(dir)
	pid := fmt.Sprintf("process %d", os.Getpid())
	if err == nil || code != 1 || !strings.Contains(err.Error(), abs) || !strings.Contains(err.Error(), pid) {
		t.Fatalf("a second leasegate on %s: %v (exit %d); want exit 1 naming the directory and %s", abs, err, code, pid)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %s; want it at once", d)
	}
}

// Arguments a command does not take are a usage error (status 2) on every
// command, as bad flags are.
func TestBadArgumentsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"serve"},
		{"shards", "show", "extra"},
		{"shards", "add"},
		{"shards", "remove", "a", "b"},
		{"id-keys", "show", "extra"},
		{"shards", "show", "--no-such-flag"},
	} {
		err, code := runFor(t, 10*time.Second, args...)
		if err == nil || code != exitUsage {
			t.Errorf("leasegate %s: %v (exit %d); want a usage error, exit %d", strings.Join(args, " "), err, code, exitUsage)
		}
	}
}

// A gateway and the operator commands refuse etcd keys of another key
// layout at once, naming the layout record and both layouts, and write
// nothing under it.
func TestAnotherKeyLayoutIsRefused(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Client().Put(ctx, "/future/layout", "2"); err != nil {
		t.Fatal(err)
	}
	err, code := runFor(t, 30*time.Second, "--listen", "127.0.0.1:0", "--etcd", "a="+c.Endpoint(), "--prefix", "/future")
	if code != 1 || err == nil || !strings.Contains(err.Error(), "/future/layout") || !strings.Contains(err.Error(), `layout "2"`) {
		t.Fatalf("gateway over layout 2: exit %d, %v; want 1 naming /future/layout and layout \"2\"", code, err)
	}
	_, _, err = runRoot(t, "shards", "show", "--etcd", "a="+c.Endpoint(), "--prefix", "/future")
	if err == nil || !strings.Contains(err.Error(), "/future/layout") {
		t.Fatalf("shards show over layout 2 = %v; want a refusal naming /future/layout", err)
	}
	resp, err := c.Client().Get(ctx, "/future/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("keys under /future after the refusals: %v, %v; want the layout record alone", resp.Kvs, err)
	}
}
