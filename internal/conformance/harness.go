package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasegate/leasegate/fence"
	"github.com/leasegate/leasegate/internal/embedetcd"
	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/testpki"
)

// The tenants the gateways know, by the keys of Description.Tokens.
const (
	// TenantNormal is a tenant with the default limits, accepted by the
	// normal gateways (indexes 0 and 1).
	TenantNormal = "normal"
	// TenantLimited is the tenant of the rate-limited gateway (index 2),
	// the only tenant that gateway accepts.
	TenantLimited = "limited"
	// TokenWrong is a well-formed bearer token no gateway accepts.
	TokenWrong = "wrong"
	// TokenRotated is a second token of the normal tenant's caller (same
	// tenant, same subject, so it owns the same locks): what a token
	// source rotates to.
	TokenRotated = "rotated"
	// TenantThrottled is a second tenant of the rate-limited gateway, whose
	// acquire budget no other scenario spends.
	TenantThrottled = "throttled"
)

// subject is the caller every token and the client certificate name, so
// that a rotated token or a certificate owns what the normal token took.
const subject = "conformance"

// LimitedGateway is the index of the rate-limited gateway in
// Description.Gateways.
const LimitedGateway = 2

// The rate-limited gateway's renewal rate: one renewal of burst, then one
// every RenewEvery, so a second renewal sent at once is refused with a
// retry delay of almost RenewEvery. Releases and hold watches count as
// renewals too. RenewEvery is kept under the SDKs' default hold-watch
// start (1 s after a grant), so a scenario's rate-limited renewal is over
// before a watch competes with it for the budget.
const (
	limitedRenewRate  = 2
	limitedRenewBurst = 1
	// RenewEvery is 1/limitedRenewRate.
	RenewEvery = 500 * time.Millisecond
)

// The rate-limited gateway's acquire budget per tenant: one acquire (or
// try-acquire) of burst, then one an hour, so the second acquire of a run
// is refused with a retry delay far longer than any wait a scenario sets.
const (
	limitedAcquireRate  = 1.0 / 3600
	limitedAcquireBurst = 1
)

// Description is what a runner is given (as JSON, in the environment
// variable LEASEGATE_CONFORMANCE): where the gateways and the control API
// are and which bearer tokens to present.
type Description struct {
	// Gateways are the gateways' base URLs (Connect, gRPC, gRPC-Web), by
	// the index scenarios name them with. Index LimitedGateway is the
	// rate-limited one.
	Gateways []string `json:"gateways"`
	// Control is the base URL of the control API.
	Control string `json:"control"`
	// Tokens are bearer tokens by tenant: TenantNormal, TenantLimited,
	// and TokenWrong.
	Tokens map[string]string `json:"tokens"`
	// Limited describes the rate-limited gateway.
	Limited LimitedDescription `json:"limited"`
	// TLS describes the gateway that takes callers only by client
	// certificate.
	TLS TLSDescription `json:"tls"`
}

// TLSDescription is the mutual-TLS gateway: it serves TLS only, demands a
// client certificate issued by CA and takes the tenant (normal) and the
// subject from it. It is not behind a counting front: the handshake is
// between the SDK and the gateway.
type TLSDescription struct {
	// Gateway is its https:// base URL.
	Gateway string `json:"gateway"`
	// CA is the PEM file of the CA that issued the gateway's certificate
	// and the client's.
	CA string `json:"ca"`
	// Cert and Key are the PEM files of a client certificate of the
	// normal tenant and its key.
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// LimitedDescription says how the rate-limited gateway is limited.
type LimitedDescription struct {
	// Gateway is its index in Gateways.
	Gateway int `json:"gateway"`
	// RenewEveryMs is the interval its renewal rate allows, after a burst
	// of one.
	RenewEveryMs int64 `json:"renewEveryMs"`
	// AcquireBurst is how many acquires each tenant may make there; the
	// next is refused for an hour.
	AcquireBurst int `json:"acquireBurst"`
}

// Config configures Start.
type Config struct {
	// Dir holds the etcd member's data and the gateways' token files; it
	// must exist. Stop leaves it for the caller to remove.
	Dir string
}

// Harness is a running conformance fleet. Stop it when done.
type Harness struct {
	desc    Description
	etcd    *etcdtest.Cluster
	fronts  []*front
	tlsGW   *server.Server
	guard   *fence.Memory
	control *http.Server
	calls   *http.Transport // the harness's own calls to the gateways
	prefix  string
}

// Start starts an embedded etcd member, the three gateways over it and the
// control API, all on loopback addresses, and returns once every one
// accepts connections. ctx bounds the gateways' start (their wait for
// etcd), not their life. An error leaves nothing running.
func Start(ctx context.Context, cfg Config) (h *Harness, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("conformance: Config.Dir is empty; give a directory for etcd's data")
	}
	h = &Harness{guard: fence.NewMemory(), calls: h2cTransport(), prefix: "/conformance"}
	defer func() {
		if err != nil {
			h.Stop()
			h = nil
		}
	}()
	if h.etcd, err = etcdtest.StartIn(filepath.Join(cfg.Dir, "etcd")); err != nil {
		return nil, err
	}
	h.desc.Tokens = map[string]string{
		TenantNormal: newToken(), TenantLimited: newToken(), TokenWrong: newToken(),
		TokenRotated: newToken(), TenantThrottled: newToken(),
	}
	normal := filepath.Join(cfg.Dir, "tokens-normal")
	limited := filepath.Join(cfg.Dir, "tokens-limited")
	if err := h.writeTokens(normal, map[string]string{TenantNormal: TenantNormal, TokenRotated: TenantNormal}); err != nil {
		return nil, err
	}
	if err := h.writeTokens(limited, map[string]string{TenantLimited: TenantLimited, TenantThrottled: TenantThrottled}); err != nil {
		return nil, err
	}
	names := map[string]string{}
	for name, tok := range h.desc.Tokens {
		names[tok] = name
	}
	for i := 0; i < 3; i++ {
		tokens, limit := normal, false
		if i == LimitedGateway {
			tokens, limit = limited, true
		}
		addr, err := embedetcd.FreeAddr()
		if err != nil {
			return nil, err
		}
		f := &front{addr: addr, tokens: names, start: h.gatewayStarter(tokens, limit)}
		f.resetRequests()
		if err := f.up(ctx); err != nil {
			return nil, fmt.Errorf("conformance: gateway %d: %w", i, err)
		}
		h.fronts = append(h.fronts, f)
		h.desc.Gateways = append(h.desc.Gateways, "http://"+addr)
	}
	h.desc.Limited = LimitedDescription{Gateway: LimitedGateway, RenewEveryMs: RenewEvery.Milliseconds(), AcquireBurst: limitedAcquireBurst}
	if err := h.startTLS(ctx, filepath.Join(cfg.Dir, "pki")); err != nil {
		return nil, fmt.Errorf("conformance: mutual-TLS gateway: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h.control = &http.Server{Handler: h.controlHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.control.Serve(ln) }()
	h.desc.Control = "http://" + ln.Addr().String()
	return h, nil
}

// gatewayStarter returns the function that starts one gateway process of
// the fleet: every gateway serves the same prefix over the same etcd, so
// they share queues, locks and the keys that sign lock ids.
func (h *Harness) gatewayStarter(tokens string, limited bool) func(context.Context) (*server.Server, error) {
	return func(ctx context.Context) (*server.Server, error) {
		cfg := server.DefaultConfig()
		cfg.Listen = "127.0.0.1:0"
		cfg.Prefix = h.prefix
		cfg.Clusters = []server.Cluster{{Name: "main", Endpoints: []string{h.etcd.Endpoint()}}}
		cfg.Gateway.Auth.TokensFile = tokens
		if limited {
			cfg.Gateway.Limits.TenantRenewRate = limitedRenewRate
			cfg.Gateway.Limits.TenantRenewBurst = limitedRenewBurst
			cfg.Gateway.Limits.TenantAcquireRate = limitedAcquireRate
			cfg.Gateway.Limits.TenantAcquireBurst = limitedAcquireBurst
		}
		return server.Start(ctx, cfg)
	}
}

// writeTokens writes a gateway's tokens file: each token of
// Description.Tokens named in tenantOf, for its tenant there.
func (h *Harness) writeTokens(path string, tenantOf map[string]string) error {
	var b strings.Builder
	for name, tenant := range tenantOf {
		fmt.Fprintf(&b, "%s %s %s\n", h.desc.Tokens[name], tenant, subject)
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// startTLS starts the mutual-TLS gateway, over the same etcd and prefix
// as the others, with a throwaway CA in dir.
func (h *Harness) startTLS(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	pki, err := testpki.NewIn(dir)
	if err != nil {
		return err
	}
	cert, key, err := pki.IssueClient(TenantNormal, subject)
	if err != nil {
		return err
	}
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Prefix = h.prefix
	cfg.Clusters = []server.Cluster{{Name: "main", Endpoints: []string{h.etcd.Endpoint()}}}
	cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = pki.ServerCert, pki.ServerKey, pki.CAFile
	if h.tlsGW, err = server.Start(ctx, cfg); err != nil {
		return err
	}
	h.desc.TLS = TLSDescription{Gateway: h.tlsGW.URL(), CA: pki.CAFile, Cert: cert, Key: key}
	return nil
}

// Description returns where the gateways and the control API are.
func (h *Harness) Description() Description { return h.desc }

// Stop stops the control API, the gateways and etcd. Calling it twice is
// harmless.
func (h *Harness) Stop() {
	if h.control != nil {
		_ = h.control.Close()
		h.control = nil
	}
	for _, f := range h.fronts {
		f.down()
	}
	h.fronts = nil
	if h.tlsGW != nil {
		shutdownNow(h.tlsGW)
		h.tlsGW = nil
	}
	h.calls.CloseIdleConnections()
	if h.etcd != nil {
		h.etcd.Stop()
		h.etcd = nil
	}
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "conf-" + hex.EncodeToString(b)
}
