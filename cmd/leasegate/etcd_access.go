package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/shard"
)

// etcdSecurityFlags are the flags addEtcdSecurityFlags defines.
var etcdSecurityFlags = []string{"etcd-ca", "etcd-cert", "etcd-key", "etcd-user", "etcd-password"}

// addEtcdSecurityFlags defines on f the flags for TLS and authentication
// to etcd, into sec: the gateway and the operator commands (shards,
// id-keys) take the same ones.
func addEtcdSecurityFlags(f *pflag.FlagSet, sec *server.EtcdSecurity) {
	f.StringVar(&sec.Cert, "etcd-cert", "", "PEM client certificate for etcd")
	f.StringVar(&sec.Key, "etcd-key", "", "PEM private key for --etcd-cert")
	f.StringVar(&sec.CA, "etcd-ca", "", "PEM CA bundle that signed etcd's server certificates (enables TLS to etcd)")
	f.StringVar(&sec.User, "etcd-user", "", "etcd user (etcd auth); see docs/security.md for the role it needs")
	f.StringVar(&sec.Password, "etcd-password", "", "etcd password for --etcd-user (prefer LEASEGATE_ETCD_PASSWORD)")
}

// etcdAccess is how an operator command reaches etcd: with the gateway's
// etcd security flags, which, as the gateway's do, fall back to their
// LEASEGATE_* variables and then to the gateway's config file (--config
// or LEASEGATE_CONFIG), of which only those keys are used.
type etcdAccess struct {
	sec server.EtcdSecurity
}

// addFlags defines the flags on f, the command's persistent flags.
func (a *etcdAccess) addFlags(f *pflag.FlagSet) {
	own := pflag.NewFlagSet("etcd", pflag.ContinueOnError)
	addEtcdSecurityFlags(own, &a.sec)
	own.String(configFlag, "", "the gateway's YAML or JSON config file: its "+strings.Join(etcdSecurityFlags, ", ")+" keys are used (flags and LEASEGATE_* win over it), any other key of the gateway's is ignored")
	showEnv(own)
	f.AddFlagSet(own)
}

// dialer completes the flags of cmd from the environment and the config
// file and returns the function that dials an etcd cluster with them. A
// mistake in them is a usage error.
func (a *etcdAccess) dialer(cmd *cobra.Command) (func(name string, endpoints []string) (*clientv3.Client, error), error) {
	fs := pflag.NewFlagSet("etcd", pflag.ContinueOnError)
	for _, name := range append([]string{configFlag}, etcdSecurityFlags...) {
		fs.AddFlag(cmd.Flags().Lookup(name))
	}
	if err := applyEnv(fs); err != nil {
		return nil, usageError{err}
	}
	if err := applyConfigFileKeys(fs, cmd.Root().Flags()); err != nil {
		return nil, usageError{err}
	}
	if err := a.sec.Validate(); err != nil {
		return nil, usageError{err}
	}
	dial, err := a.sec.Dialer(nil)
	if err != nil {
		return nil, usageError{err}
	}
	return dial, nil
}

// connect dials c, the cluster an operator command works on, with a's
// flags and makes sure it can read prefix there, so that a command that
// cannot use the cluster says at once what stops it: no etcd at the
// address, TLS where the endpoint says plain or a CA that did not sign
// the server's certificate, a client certificate etcd requires or
// refuses, missing or wrong credentials, a role without the prefix.
func (a *etcdAccess) connect(ctx context.Context, dial func(string, []string) (*clientv3.Client, error), c server.Cluster, prefix string) (*clientv3.Client, error) {
	if err := shard.CheckPrefix(prefix); err != nil {
		return nil, usageError{fmt.Errorf("--prefix: %w", err)}
	}
	where := fmt.Sprintf("etcd cluster %q at %s", c.Name, strings.Join(c.Endpoints, ","))
	cli, err := dial(c.Name, c.Endpoints)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, a.explain(err))
	}
	ctx, cancel := context.WithTimeout(ctx, connectWait)
	defer cancel()
	if err := a.awaitConnection(ctx, cli, c.Endpoints); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if _, err := cli.Get(ctx, shard.NewStore(cli, prefix).Key(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: no answer within %s: is etcd running there, and are the endpoint's scheme (http:// or https://) and --etcd-ca right?", where, connectWait)
		}
		return nil, fmt.Errorf("%s: %w", where, a.explain(err))
	}
	return cli, nil
}

// connectWait bounds connect.
const connectWait = 15 * time.Second

// awaitConnection waits until cli's connection is ready, and when it
// fails instead, tries the endpoints itself to tell why.
func (a *etcdAccess) awaitConnection(ctx context.Context, cli *clientv3.Client, endpoints []string) error {
	conn := cli.ActiveConnection()
	conn.Connect()
	for {
		switch s := conn.GetState(); s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure:
			for _, ep := range endpoints {
				if err := a.whyNoConnection(ctx, ep); err != nil {
					if len(endpoints) > 1 {
						err = fmt.Errorf("%s: %w", ep, err)
					}
					return err
				}
			}
			return nil // it may connect yet: the read that follows tells
		default:
			if !conn.WaitForStateChange(ctx, s) {
				return nil // the read that follows reports the time out
			}
		}
	}
}

// whyNoConnection connects to endpoint as the etcd client does and
// returns what stops it, naming the flag that would change it; nil when
// nothing does.
func (a *etcdAccess) whyNoConnection(ctx context.Context, endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("endpoint %q: want http://host:port or https://host:port", endpoint)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return fmt.Errorf("%w: is etcd running there?", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if u.Scheme == "http" {
		// A plain endpoint whose server answers a TLS handshake serves TLS.
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only asks whether the server speaks TLS
		if err := tc.HandshakeContext(ctx); err == nil || isTLSAlert(err) {
			return errors.New("etcd serves TLS there: use https:// endpoints and --etcd-ca")
		}
		return nil
	}
	cfg, err := a.sec.TLSConfig()
	if err != nil {
		return err
	}
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12} // the system's roots, as the etcd client uses
	}
	cfg = cfg.Clone()
	cfg.ServerName = u.Hostname()
	asked := false
	if a.sec.Cert == "" {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked = true
			return &tls.Certificate{}, nil
		}
	}
	tc := tls.Client(conn, cfg)
	err = tc.HandshakeContext(ctx)
	if err == nil {
		// TLS 1.3 refuses a client certificate after the handshake: a
		// refusal arrives as the first thing read, as an alert or, when
		// the server closed first, as the connection's end. A server
		// that asked for a certificate this side has none of is given
		// until the probe's deadline to refuse; any other only briefly,
		// as etcd waits for the client to speak first.
		if !asked {
			_ = tc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		}
		_, err = tc.Read(make([]byte, 1))
		var ne net.Error
		switch {
		case isTLSAlert(err):
		case asked && err != nil && !(errors.As(err, &ne) && ne.Timeout()):
			return fmt.Errorf("%w: etcd asked for a client certificate and closed the connection: it requires one: set --etcd-cert and --etcd-key", err)
		default:
			return nil
		}
	}
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	switch {
	case errors.As(err, &unknownCA) && a.sec.CA == "":
		return fmt.Errorf("%w: etcd serves TLS with a certificate the system does not trust: set --etcd-ca to the CA bundle that signed it", err)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("%w: --etcd-ca %s did not sign etcd's server certificate", err, a.sec.CA)
	case errors.As(err, &hostname):
		return fmt.Errorf("%w: connect by a name or address etcd's certificate names", err)
	case isTLSAlert(err) && a.sec.Cert == "":
		return fmt.Errorf("%w: etcd requires a client certificate: set --etcd-cert and --etcd-key", err)
	case isTLSAlert(err):
		return fmt.Errorf("%w: etcd refused the client certificate --etcd-cert %s (not signed by a CA etcd trusts?)", err, a.sec.Cert)
	case err != nil:
		return fmt.Errorf("TLS: %w", err)
	}
	return nil
}

// isTLSAlert reports whether err is the peer's refusal of a TLS handshake.
func isTLSAlert(err error) bool {
	return err != nil && strings.Contains(err.Error(), "remote error: tls:")
}

// explain adds to an error of etcd's authentication which flags to set.
func (a *etcdAccess) explain(err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrGRPCUserEmpty):
		return fmt.Errorf("%w: etcd requires authentication: set --etcd-user and --etcd-password (or LEASEGATE_ETCD_USER and LEASEGATE_ETCD_PASSWORD)", err)
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrGRPCAuthFailed):
		return fmt.Errorf("%w: check --etcd-user %q and --etcd-password", err, a.sec.User)
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrGRPCPermissionDenied):
		return fmt.Errorf("%w: etcd user %q needs readwrite on the --prefix (docs/security.md, \"From the gateway to etcd\")", err, a.sec.User)
	}
	return err
}
