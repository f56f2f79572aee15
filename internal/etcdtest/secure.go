package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasegate/leasegate/internal/embedetcd"
	"github.com/leasegate/leasegate/internal/testpki"
)

// Certs are the PEM files of a CA made for one test, a server certificate
// for 127.0.0.1 and localhost, and a client certificate, both signed by
// the CA. Other is a CA that signed neither.
type Certs struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// Other is the certificate of a CA unrelated to the others.
	Other string
}

// NewCerts creates a fresh CA and the certificates it signs, and another
// CA, in t's temporary directory.
func NewCerts(t testing.TB) Certs {
	t.Helper()
	p := testpki.New(t)
	cert, key := p.ClientCert(t, "", "leasegate")
	return Certs{CA: p.CAFile, ServerCert: p.ServerCert, ServerKey: p.ServerKey, ClientCert: cert, ClientKey: key,
		Other: testpki.New(t).CAFile}
}

// StartTLS launches a member, as Start does, that serves clients over TLS
// only (an https:// Endpoint) with certs' server certificate and, when
// requireClientCert is set, refuses clients without a certificate
// certs.CA signed. Client and ClientFor connect with certs' client
// certificate.
func StartTLS(t testing.TB, certs Certs, requireClientCert bool) *Cluster {
	t.Helper()
	dir := t.TempDir()
	addr, err := embedetcd.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := embedetcd.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ct := embedetcd.ClientTLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey}
	if requireClientCert {
		ct.ClientCAFile = certs.CA
	}
	c := &Cluster{t: t, dir: dir, cfg: embedetcd.Config{Name: "test", Dir: dir, ClientAddr: addr, PeerAddr: peer, UnsafeNoFsync: true, ClientTLS: ct}}
	if c.tls, err = clientTLS(certs); err != nil {
		t.Fatal(err)
	}
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func clientTLS(certs Certs) (*tls.Config, error) {
	pemCA, err := os.ReadFile(certs.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// EnableAuth turns on etcd authentication on c: a root user with
// rootPassword, and user with password, whose role may read and write
// every key under prefix (the role docs/security.md gives a gateway).
// Afterwards Client and ClientFor log in as root.
func (c *Cluster) EnableAuth(rootPassword, user, password, prefix string) {
	c.t.Helper()
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, user); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, user, password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, user, user); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			c.t.Fatalf("enabling etcd auth, step %d: %v", i, err)
		}
	}
	c.user, c.password = "root", rootPassword
}

// newClient dials c with its TLS and credentials.
func (c *Cluster) newClient() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{c.endpoint},
		DialTimeout: 5 * time.Second,
		TLS:         c.tls,
		Username:    c.user,
		Password:    c.password,
		Logger:      zap.NewNop(),
	})
}
