package gwtest

import (
	"testing"

	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/testpki"
)

// PKI is a throwaway certificate authority for TLS and mTLS tests
// (testpki.PKI): its CAFile is the gateway's --tls-client-ca and the
// client's --cacert, its ServerCert and ServerKey the gateway's --tls-cert
// and --tls-key.
type PKI = testpki.PKI

// NewPKI makes a CA and a server certificate in tb's temporary directory.
func NewPKI(tb testing.TB) *PKI { return testpki.New(tb) }

// TLS serves TLS only, with p's server certificate; with clientCA, it
// also verifies client certificates against p's CA and takes identities
// from them (mTLS).
func TLS(p *PKI, clientCA bool) Option {
	return Configure(func(cfg *server.Config) {
		cfg.TLSCert, cfg.TLSKey = p.ServerCert, p.ServerKey
		if clientCA {
			cfg.TLSClientCA = p.CAFile
		}
	})
}
