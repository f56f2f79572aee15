package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/server"
)

// securityFlags are the flags for TLS, authentication, tenant policy and
// limits; they map onto server.Config in apply.
type securityFlags struct {
	policyFile string
}

func addSecurityFlags(f *pflag.FlagSet, cfg *server.Config, sec *securityFlags) {
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate for the listener; with --tls-key, serves TLS only")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key for --tls-cert")
	f.StringVar(&cfg.TLSClientCA, "tls-client-ca", "", "PEM CA bundle: verify client certificates (mTLS); the tenant is the certificate's Organization (O)")
	f.StringVar(&cfg.Gateway.Auth.TokensFile, "auth-tokens", "", `file of static bearer tokens, lines "TOKEN TENANT [SUBJECT [ROLES]]" (ROLES: admin for AdminService in the tenant, operator for the process's operator)`)
	f.StringVar(&cfg.Gateway.Auth.JWTKeysFile, "jwt-keys", "", "PEM public keys that may sign bearer JWTs (RS*, PS256, ES256/384, EdDSA)")
	f.StringVar(&cfg.Gateway.Auth.JWKSURL, "jwt-jwks-url", "", "JSON Web Key Set URL (https://, or http:// on loopback) of keys that may sign bearer JWTs; refreshed every --jwt-jwks-refresh and on an unknown kid")
	f.DurationVar(&cfg.Gateway.Auth.JWKSRefresh, "jwt-jwks-refresh", gateway.DefaultJWKSRefresh, "how often --jwt-jwks-url is fetched again (10s to 24h)")
	f.StringVar(&cfg.Gateway.Auth.JWTIssuer, "jwt-issuer", "", "required iss of bearer JWTs")
	f.StringVar(&cfg.Gateway.Auth.JWTAudience, "jwt-audience", "", "required aud of bearer JWTs")
	f.StringVar(&cfg.Gateway.Auth.JWTTenantClaim, "jwt-tenant-claim", gateway.DefaultJWTTenantClaim, "JWT claim naming the caller's tenant")
	f.StringVar(&cfg.Gateway.Auth.JWTRolesClaim, "jwt-roles-claim", gateway.DefaultJWTRolesClaim, "JWT claim listing the caller's roles (\"admin\" allows AdminService in the tenant, \"operator\" makes the process's operator)")
	f.StringVar(&sec.policyFile, "tenant-policy", "", `JSON file {"TENANT": {"namePrefixes": ["orders/", …]}} restricting the names tenants may lock`)
	f.StringVar(&cfg.IDKeysFile, "id-keys-file", "", "file of the keys that sign lock and session ids, lines \"NUMBER BASE64-SECRET\" (first signs; mode 0600); default: kept in the home etcd cluster")
	f.BoolVar(&cfg.AllowInsecureRemote, "allow-insecure-remote", false, "serve a non-loopback address without authentication (anyone who can connect can take or steal any lock)")
	l := &cfg.Gateway.Limits
	f.Float64Var(&l.TenantAcquireRate, "tenant-acquire-rate", 0, "acquires per second per tenant (0 = unlimited)")
	f.IntVar(&l.TenantAcquireBurst, "tenant-acquire-burst", 100, "burst for --tenant-acquire-rate")
	f.Float64Var(&l.ClientAcquireRate, "client-acquire-rate", 0, "acquires per second per client (0 = unlimited)")
	f.IntVar(&l.ClientAcquireBurst, "client-acquire-burst", 20, "burst for --client-acquire-rate")
	f.Float64Var(&l.TenantRenewRate, "tenant-renew-rate", 0, "renewals per second per tenant (0 = unlimited)")
	f.IntVar(&l.TenantRenewBurst, "tenant-renew-burst", 1000, "burst for --tenant-renew-rate")
	f.Float64Var(&l.ClientRenewRate, "client-renew-rate", 0, "renewals per second per client (tenant and subject; 0 = unlimited)")
	f.IntVar(&l.ClientRenewBurst, "client-renew-burst", 100, "burst for --client-renew-rate")
	f.IntVar(&l.MaxWaitersPerName, "max-waiters-per-name", l.MaxWaitersPerName, "cap on holders and waiters of one name (0 = unlimited)")
	f.IntVar(&l.MaxWaitersPerTenant, "max-waiters-per-tenant", l.MaxWaitersPerTenant, "cap on open waits and watches (Acquire, Campaign, Observe, Watch, WatchHold streams) per tenant on this gateway (0 = unlimited)")
	f.IntVar(&l.MaxKeysPerTenant, "max-keys-per-tenant", l.MaxKeysPerTenant, "cap on a tenant's held and waiting locks per shard (0 = unlimited)")
	f.IntVar(&cfg.Fleet.Queue.MaxWatchKeys, "max-watch-keys-per-tenant", cfg.Fleet.Queue.MaxWatchKeys, "cap on the keys a tenant's Watch streams on this gateway follow per shard; streams of one prefix share them (0 = unlimited)")
	f.Uint32Var(&cfg.MaxStreamsPerConn, "max-streams-per-conn", cfg.MaxStreamsPerConn, "HTTP/2 streams one connection may have open")
	f.IntVar(&cfg.MaxConns, "max-conns", cfg.MaxConns, "connections the listener holds open (0 = unlimited)")
	f.IntVar(&cfg.MaxConnsPerIP, "max-conns-per-ip", cfg.MaxConnsPerIP, "connections from one remote address (0 = unlimited)")
	f.StringSliceVar(&cfg.Gateway.CORSOrigins, "cors-origin", nil, "origin (scheme://host[:port], or *) whose browser pages may call the gateway; repeat or comma-separate")
	addEtcdSecurityFlags(f, &cfg.EtcdTLS)
}

// apply loads the files the flags name into cfg.
func (sec *securityFlags) apply(cfg *server.Config) error {
	if sec.policyFile == "" {
		return nil
	}
	raw, err := os.ReadFile(sec.policyFile)
	if err != nil {
		return fmt.Errorf("--tenant-policy: %w", err)
	}
	var doc map[string]struct {
		NamePrefixes []string `json:"namePrefixes"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("--tenant-policy %s: %w", sec.policyFile, err)
	}
	cfg.Gateway.Policy.NamePrefixes = map[string][]string{}
	for t, p := range doc {
		cfg.Gateway.Policy.NamePrefixes[t] = p.NamePrefixes
	}
	return nil
}
