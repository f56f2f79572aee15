// Package testpki makes throwaway certificate authorities for TLS and
// mTLS tests: a CA, a server certificate for 127.0.0.1, ::1 and
// localhost, and client certificates on demand, as PEM files in a test's
// temporary directory.
package testpki

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
)

// PKI is a throwaway certificate authority: a CA, a server certificate
// for 127.0.0.1, ::1 and localhost, and client certificates on demand.
type PKI struct {
	// CAFile is the CA certificate (the gateway's --tls-client-ca, the
	// client's --cacert).
	CAFile string
	// ServerCert and ServerKey are the gateway's --tls-cert and --tls-key.
	ServerCert, ServerKey string

	dir   string
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// New makes a CA and a server certificate in tb's temporary directory.
func New(tb testing.TB) *PKI {
	tb.Helper()
	p, err := NewIn(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// NewIn makes a CA and a server certificate in dir, which must exist: for
// a program (the conformance harness) that has no testing.TB.
func NewIn(dir string) (*PKI, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: "leasegate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &PKI{dir: dir, ca: ca, caKey: k}
	if p.CAFile, err = p.write("ca.pem", "CERTIFICATE", der); err != nil {
		return nil, err
	}
	if p.ServerCert, p.ServerKey, err = p.issue("server", pkix.Name{CommonName: "127.0.0.1"}, true); err != nil {
		return nil, err
	}
	return p, nil
}

// Pool is a certificate pool holding the CA.
func (p *PKI) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return pool
}

// ClientCert issues a client certificate whose subject names tenant (its
// Organization) and subject (its Common Name), and returns its
// certificate and key files.
func (p *PKI) ClientCert(tb testing.TB, tenant, subject string) (certFile, keyFile string) {
	tb.Helper()
	certFile, keyFile, err := p.IssueClient(tenant, subject)
	if err != nil {
		tb.Fatal(err)
	}
	return certFile, keyFile
}

// IssueClient is ClientCert for a program without a testing.TB.
func (p *PKI) IssueClient(tenant, subject string) (certFile, keyFile string, err error) {
	return p.issue("client-"+tenant+"-"+subject, pkix.Name{CommonName: subject, Organization: []string{tenant}}, false)
}

// ClientTLS is a TLS configuration trusting the CA and, when tenant is
// not empty, presenting a client certificate for tenant and subject.
func (p *PKI) ClientTLS(tb testing.TB, tenant, subject string) *tls.Config {
	tb.Helper()
	cfg := &tls.Config{RootCAs: p.Pool()}
	if tenant != "" {
		certFile, keyFile := p.ClientCert(tb, tenant, subject)
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			tb.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

func (p *PKI) issue(name string, subj pkix.Name, isServer bool) (certFile, keyFile string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	sn, err := serial()
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: subj,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if isServer {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.caKey)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", "", err
	}
	if certFile, err = p.write(name+".pem", "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	keyFile, err = p.write(name+".key", "PRIVATE KEY", kder)
	return certFile, keyFile, err
}

func (p *PKI) write(name, typ string, der []byte) (string, error) {
	path := filepath.Join(p.dir, name)
	return path, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// NewKey is a fresh P-256 key.
func NewKey(tb testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func serial() (*big.Int, error) { return rand.Int(rand.Reader, big.NewInt(1<<62)) }
