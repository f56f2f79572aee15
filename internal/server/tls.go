package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leasegate/leasegate/internal/reload"
)

// EtcdSecurity configures TLS and authentication from the gateway to etcd.
type EtcdSecurity struct {
	// CA verifies etcd's server certificates; setting it enables TLS.
	CA string
	// Cert and Key are the gateway's client certificate for etcd.
	Cert, Key string
	// User and Password authenticate to etcd (etcd auth / RBAC).
	User, Password string
}

// Validate reports the first mistake in e, naming the flags that set it.
func (e EtcdSecurity) Validate() error {
	if (e.Cert == "") != (e.Key == "") {
		return errors.New("--etcd-cert and --etcd-key go together")
	}
	if e.Cert != "" && e.CA == "" {
		return errors.New("--etcd-cert needs --etcd-ca: a client certificate is only sent over TLS")
	}
	if (e.User == "") != (e.Password == "") {
		return errors.New("--etcd-user and --etcd-password go together")
	}
	return nil
}

// Dialer returns the function that connects to an etcd cluster with e's
// TLS and credentials: the one way the gateway and the operator commands
// dial etcd. It reads the files e names once, here; an error names the
// flag of the file that does not load. extra, when not nil, adds gRPC
// dial options per cluster (telemetry).
func (e EtcdSecurity) Dialer(extra func(name string) []grpc.DialOption) (func(name string, endpoints []string) (*clientv3.Client, error), error) {
	tlsCfg, err := e.TLSConfig()
	if err != nil {
		return nil, err
	}
	return func(name string, endpoints []string) (*clientv3.Client, error) {
		var opts []grpc.DialOption
		if extra != nil {
			opts = extra(name)
		}
		return clientv3.New(clientv3.Config{
			DialOptions:          opts,
			Endpoints:            endpoints,
			DialTimeout:          5 * time.Second,
			DialKeepAliveTime:    10 * time.Second,
			DialKeepAliveTimeout: 5 * time.Second,
			TLS:                  tlsCfg,
			Username:             e.User,
			Password:             e.Password,
			Logger:               zap.NewNop(),
		})
	}, nil
}

// TLSConfig is the TLS configuration Dialer's clients use, nil without
// --etcd-ca (plain connections). It reads the files e names.
func (e EtcdSecurity) TLSConfig() (*tls.Config, error) {
	if e.CA == "" {
		return nil, nil
	}
	pool, err := loadPool(e.CA)
	if err != nil {
		return nil, fmt.Errorf("--etcd-ca: %w", err)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if e.Cert != "" {
		cert, err := tls.LoadX509KeyPair(e.Cert, e.Key)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// listenerTLS builds the listener's TLS configuration, nil without TLS.
// The certificate and key are read again when either file changes, seen
// by the next handshake after a change (at most reload.DefaultInterval
// late); a pair that does not load — a certificate written before its
// key, a key that does not match — leaves the pair in force and is logged.
// The client CA bundle is read once.
func (c Config) listenerTLS(log *slog.Logger) (*tls.Config, *reload.Value[*tls.Certificate], error) {
	if c.TLSCert == "" {
		return nil, nil, nil
	}
	pair, err := reload.New([]string{c.TLSCert, c.TLSKey}, func() (*tls.Certificate, error) {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		return &cert, err
	}, reload.Options{Name: "TLS certificate and key", Log: log})
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	cfg := &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.Get(), nil },
		MinVersion:     tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
	}
	if c.TLSClientCA != "" {
		pool, err := loadPool(c.TLSClientCA)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if c.Gateway.Auth.TokensFile != "" || c.Gateway.Auth.JWT() {
			// Bearer tokens are accepted too: a certificate is optional,
			// but verified when sent.
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return cfg, pair, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificates", path)
	}
	return pool, nil
}
