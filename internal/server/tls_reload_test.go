package server_test

import (
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

	"github.com/leasegate/leasegate/internal/server"
)

// writeServerCert writes a self-signed certificate for 127.0.0.1 with the
// given serial, and its key, to certPath and keyPath, each through a
// rename.
func writeServerCert(t *testing.T, certPath, keyPath string, serial int64) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leasegate"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	// The key first: until the certificate follows, the pair does not
	// match, and the gateway must keep serving the old one.
	for _, f := range []struct {
		path  string
		block *pem.Block
	}{{keyPath, &pem.Block{Type: "PRIVATE KEY", Bytes: kder}}, {certPath, &pem.Block{Type: "CERTIFICATE", Bytes: der}}} {
		if err := os.WriteFile(f.path+".new", pem.EncodeToMemory(f.block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f.path+".new", f.path); err != nil {
			t.Fatal(err)
		}
	}
}

// servedSerial handshakes with addr and returns the serial of the
// certificate the gateway presented.
func servedSerial(t *testing.T, addr string) int64 {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) // the serial is what is checked
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestTLSCertificateReloads replaces the listener's certificate and key
// while the gateway runs: new handshakes see the new certificate, without a
// restart.
func TestTLSCertificateReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeServerCert(t, certPath, keyPath, 1)
	srv := startGateway(t, nil, func(c *server.Config) { c.TLSCert, c.TLSKey = certPath, keyPath })
	if got := servedSerial(t, srv.Addr()); got != 1 {
		t.Fatalf("served certificate serial %d; want 1", got)
	}
	writeServerCert(t, certPath, keyPath, 2)
	deadline := time.Now().Add(10 * time.Second)
	for servedSerial(t, srv.Addr()) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the replaced certificate was not served within 10s")
		}
		time.Sleep(20 * time.Millisecond) // polling an observable effect; nothing to await
	}
	// A key that does not parse leaves the pair in force.
	if err := os.WriteFile(keyPath, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadFiles(); err == nil {
		t.Error("ReloadFiles with a broken key file succeeded; want its error")
	}
	if got := servedSerial(t, srv.Addr()); got != 2 {
		t.Errorf("after a broken key file the served serial is %d; want 2 kept", got)
	}
}
