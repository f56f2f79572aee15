package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/shard"
)

// storeMap stores the first shard map of a fleet over c, as a gateway
// does on its first start.
func storeMap(t *testing.T, c *etcdtest.Cluster, prefix string) {
	t.Helper()
	if _, err := shard.NewStore(c.Client(), prefix).CompareAndSwap(context.Background(), shard.Snapshot{}, shard.Map{
		Epoch: 1, Clusters: []shard.Cluster{{Name: "a", Endpoints: []string{c.Endpoint()}}},
	}); err != nil {
		t.Fatal(err)
	}
}

// wantRefusal checks that `leasegate args…` fails, not as a usage error
// unless usage, with a message naming each of want.
func wantRefusal(t *testing.T, usage bool, args []string, want ...string) {
	t.Helper()
	_, _, err := runRoot(t, args...)
	var ue usageError
	switch {
	case err == nil:
		t.Errorf("leasegate %s succeeded; want it refused", strings.Join(args, " "))
		return
	case errors.As(err, &ue) != usage:
		t.Errorf("leasegate %s: %v; usage error %v, want %v", strings.Join(args, " "), err, !usage, usage)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("leasegate %s: %v; want the message to name %q", strings.Join(args, " "), err, w)
		}
	}
}

// The operator commands reach etcd clusters that serve TLS only and
// require client certificates, with the gateway's --etcd-ca, --etcd-cert
// and --etcd-key, given as flags, as LEASEGATE_* variables or in the
// gateway's config file: shards show, shards add (which also dials the
// added cluster and bumps its epoch) and id-keys show. Without them, or
// with the wrong ones, each is refused at once, naming what is missing.
func TestOperatorCommandsOverTLS(t *testing.T) {
	certs := etcdtest.NewCerts(t)
	a, b := etcdtest.StartTLS(t, certs, true), etcdtest.StartTLS(t, certs, true)
	const prefix = "/lg-tls"
	storeMap(t, a, prefix)
	home := []string{"--etcd", "a=" + a.Endpoint(), "--prefix", prefix}
	creds := []string{"--etcd-ca", certs.CA, "--etcd-cert", certs.ClientCert, "--etcd-key", certs.ClientKey}
	cmd := func(sub ...string) []string { return append(append(sub, home...), creds...) }

	out, progress, err := runRoot(t, cmd("shards", "show")...)
	if err != nil || !strings.HasPrefix(strings.Join(strings.Fields(out), " "), "epoch 1 cluster a https://") {
		t.Fatalf("shards show over TLS = %q, %v\n%s", out, err, progress)
	}
	out, progress, err = runRoot(t, cmd("shards", "add", "b="+b.Endpoint(), "-o", "json")...)
	var m shard.Map
	if err != nil || json.Unmarshal([]byte(out), &m) != nil || m.Epoch != 2 || len(m.Clusters) != 2 {
		t.Fatalf("shards add over TLS = %q, %v; want the map at epoch 2 over a and b\n%s", out, err, progress)
	}
	if e, err := shard.ReadEpoch(context.Background(), b.Client(), prefix); err != nil || e != 2 {
		t.Fatalf("the added cluster's epoch = %d, %v; want 2", e, err)
	}
	out, _, err = runRoot(t, cmd("id-keys", "show")...)
	if err != nil || !strings.Contains(out, "sign, verify") {
		t.Fatalf("id-keys show over TLS = %q, %v", out, err)
	}

	t.Run("environment", func(t *testing.T) {
		t.Setenv("LEASEGATE_ETCD_CA", certs.CA)
		t.Setenv("LEASEGATE_ETCD_CERT", certs.ClientCert)
		t.Setenv("LEASEGATE_ETCD_KEY", certs.ClientKey)
		for _, sub := range [][]string{{"shards", "show"}, {"id-keys", "show"}} {
			if _, _, err := runRoot(t, append(sub, home...)...); err != nil {
				t.Errorf("%s with LEASEGATE_ETCD_CA, _CERT, _KEY: %v", strings.Join(sub, " "), err)
			}
		}
		// A flag wins over its variable.
		wantRefusal(t, false, append([]string{"shards", "show", "--etcd-ca", certs.Other}, home...), "--etcd-ca "+certs.Other, "did not sign")
	})
	t.Run("config file", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "leasegate.yaml")
		// The gateway's own file: its other keys are the gateway's, not errors.
		conf := "listen: 127.0.0.1:7070\ndefault-ttl: 30s\netcd-ca: " + certs.CA + "\netcd-cert: " + certs.ClientCert + "\netcd-key: " + certs.ClientKey + "\n"
		if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, sub := range [][]string{{"shards", "show", "--config", file}, {"id-keys", "show", "--config", file}} {
			if _, _, err := runRoot(t, append(sub, home...)...); err != nil {
				t.Errorf("%s: %v", strings.Join(sub, " "), err)
			}
		}
		t.Setenv("LEASEGATE_CONFIG", file)
		if _, _, err := runRoot(t, append([]string{"shards", "show"}, home...)...); err != nil {
			t.Errorf("shards show with LEASEGATE_CONFIG: %v", err)
		}
		typo := filepath.Join(dir, "typo.yaml")
		if err := os.WriteFile(typo, []byte("etcd-cacert: "+certs.CA+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		wantRefusal(t, true, append([]string{"shards", "show", "--config", typo}, home...), `unknown key "etcd-cacert"`)
	})

	httpA := "a=" + strings.Replace(a.Endpoint(), "https://", "http://", 1)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, sub := range [][]string{{"shards", "show"}, {"id-keys", "show"}} {
		args := func(extra ...string) []string { return append(append(append([]string{}, sub...), home...), extra...) }
		wantRefusal(t, false, args(), "--etcd-ca", "does not trust")
		wantRefusal(t, false, append(append([]string{}, sub...), "--etcd", httpA, "--prefix", prefix), "serves TLS", "https://", "--etcd-ca")
		wantRefusal(t, false, args("--etcd-ca", certs.CA), "client certificate", "--etcd-cert", "--etcd-key")
		wantRefusal(t, false, args("--etcd-ca", certs.Other, "--etcd-cert", certs.ClientCert, "--etcd-key", certs.ClientKey), "--etcd-ca "+certs.Other, "did not sign")
		wantRefusal(t, true, args("--etcd-ca", missing), "--etcd-ca", missing)
		wantRefusal(t, true, args("--etcd-ca", certs.CA, "--etcd-cert", certs.ClientCert), "--etcd-cert and --etcd-key go together")
	}
}

// The operator commands log in to an etcd cluster with authentication
// enabled with the gateway's --etcd-user and --etcd-password (the
// password also from LEASEGATE_ETCD_PASSWORD, as docs/security.md
// advises); without them, with a wrong password or with a user whose role
// does not cover the prefix, each is refused naming the flags.
func TestOperatorCommandsWithEtcdAuth(t *testing.T) {
	c := etcdtest.Start(t)
	const prefix = "/lg-auth"
	storeMap(t, c, prefix)
	c.EnableAuth("root-secret", "leasegate", "gateway-secret", prefix+"/")
	home := []string{"--etcd", "a=" + c.Endpoint(), "--prefix", prefix}
	for _, sub := range [][]string{{"shards", "show"}, {"id-keys", "show"}} {
		args := func(extra ...string) []string { return append(append(append([]string{}, sub...), home...), extra...) }
		if out, _, err := runRoot(t, args("--etcd-user", "leasegate", "--etcd-password", "gateway-secret")...); err != nil || out == "" {
			t.Errorf("%s with --etcd-user and --etcd-password = %q, %v", strings.Join(sub, " "), out, err)
		}
		wantRefusal(t, false, args(), "user name is empty", "--etcd-user", "--etcd-password")
		wantRefusal(t, false, args("--etcd-user", "leasegate", "--etcd-password", "wrong"), "authentication failed", `--etcd-user "leasegate"`, "--etcd-password")
		wantRefusal(t, false, append(append([]string{}, sub...), "--etcd", "a="+c.Endpoint(), "--prefix", "/elsewhere", "--etcd-user", "leasegate", "--etcd-password", "gateway-secret"),
			"permission denied", "--prefix")
		wantRefusal(t, true, args("--etcd-user", "leasegate"), "--etcd-user and --etcd-password go together")
	}
	// Nothing listening: refused at once, not after the command's timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "a=http://" + ln.Addr().String()
	ln.Close()
	start := time.Now()
	wantRefusal(t, false, []string{"shards", "show", "--etcd", closed}, ln.Addr().String(), "connection refused", "is etcd running there?")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal of a closed port took %s; want it at once", d)
	}

	t.Setenv("LEASEGATE_ETCD_PASSWORD", "gateway-secret")
	if _, _, err := runRoot(t, append([]string{"shards", "show", "--etcd-user", "leasegate"}, home...)...); err != nil {
		t.Errorf("shards show --etcd-user with LEASEGATE_ETCD_PASSWORD: %v", err)
	}
}

// The operator commands' --help names the variables their etcd flags
// read, as the gateway's does.
func TestOperatorHelpShowsEtcdEnv(t *testing.T) {
	for _, sub := range []string{"shards", "id-keys"} {
		out, _, err := runRoot(t, sub, "show", "--help")
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range append([]string{configFlag}, etcdSecurityFlags...) {
			if !strings.Contains(out, "--"+name) || !strings.Contains(out, "[$"+envName(name)+"]") {
				t.Errorf("leasegate %s show --help does not list --%s with $%s:\n%s", sub, name, envName(name), out)
			}
		}
	}
}

// The operator commands refuse the key prefixes the gateway refuses, so
// they never read or write a map the gateway does not: "/" alone and a
// prefix without its leading '/'.
func TestOperatorCommandsRefuseABadPrefix(t *testing.T) {
	t.Parallel()
	for _, sub := range [][]string{{"shards", "show"}, {"id-keys", "show"}} {
		for _, p := range []string{"/", "leasegate", "/with space"} {
			wantRefusal(t, true, append(append([]string{}, sub...), "--etcd", "a=http://127.0.0.1:1", "--prefix", p), "--prefix", fmt.Sprintf("key prefix %q", p))
		}
	}
}
