package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasegate/leasegate/internal/embedetcd"
)

// Certs are the PEM files of a CA made for one test, a server certificate
// for 127.0.0.1 and localhost, and a client certificate, both signed by
// the CA. Other is a CA that signed neither.
type Certs struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// Other is the certificate of a CA unrelated to the others.
	Other string
}

// WriteCerts creates a fresh CA and the certificates it signs in dir.
func WriteCerts(t testing.TB, dir string) Certs {
	t.Helper()
	c := Certs{
		CA: filepath.Join(dir, "ca.pem"), Other: filepath.Join(dir, "other-ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	ca, caKey := newCA(t, "leasegate test CA", c.CA)
	newCA(t, "unrelated test CA", c.Other)
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "etcd"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	signed(t, server, ca, caKey, c.ServerCert, c.ServerKey)
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "leasegate"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	signed(t, client, ca, caKey, c.ClientCert, c.ClientKey)
	return c
}

var serial = big.NewInt(time.Now().UnixNano())

func nextSerial() *big.Int { return serial.Add(serial, big.NewInt(1)) }

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newCA(t testing.TB, name, certFile string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, k
}

func signed(t testing.TB, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) {
	t.Helper()
	k := newKey(t)
	tmpl.SerialNumber = nextSerial()
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "PRIVATE KEY", kder)
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
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
