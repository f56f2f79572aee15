package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
)

// Authenticate with a static bearer token or a JWT (docs/security.md). The
// examples below need a secured gateway, so they are compiled, not run;
// internal/sdktest runs the same calls against one.
func ExampleWithBearerToken() {
	c, err := client.New([]string{"https://locks.internal:7443"},
		client.WithBearerToken(os.Getenv("LEASEGATE_TOKEN")))
	if err != nil {
		log.Fatal(err) // an empty token or one with whitespace is refused here
	}
	defer c.Close()
	lock, err := c.TryAcquire(context.Background(), "orders/42")
	if err != nil {
		log.Fatal(err) // connect.CodeOf(err) == connect.CodeUnauthenticated: a bad token
	}
	defer lock.Release(context.Background())
}

// Read the token for every request, so that a rotated token file (or a
// refreshed JWT) is used without making a new Client.
func ExampleWithTokenSource() {
	const path = "/var/run/secrets/leasegate/token"
	c, err := client.New([]string{"https://locks.internal:7443"},
		client.WithTokenSource(func(context.Context) (string, error) {
			b, err := os.ReadFile(path)
			return strings.TrimSpace(string(b)), err
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	lock, err := c.Acquire(context.Background(), "nightly-report", client.WithWaitTimeout(time.Minute))
	if err != nil {
		log.Fatal(err) // a failed read ends the call at once, wrapping the read's error
	}
	defer lock.Release(context.Background())
}

// Trust a private CA and present a client certificate (mTLS): the tenant is
// the certificate's Organization, the subject its Common Name.
func ExampleWithTLSConfig() {
	caPEM, err := os.ReadFile("ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair("client.pem", "client.key")
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New([]string{"https://locks.internal:7443"},
		client.WithTLSConfig(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}),
		client.WithProtocol(client.ProtocolGRPC)) // HTTP/2 over TLS
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.TryAcquire(context.Background(), "orders/42"); err != nil {
		log.Fatal(err) // an untrusted or missing certificate: unauthenticated, not retried
	}
}

// Log every call; interceptors run outside the credentials, so they never
// see the Authorization header.
func ExampleWithInterceptors() {
	logCalls := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			resp, err := next(ctx, req)
			log.Printf("%s took %s: %v", req.Spec().Procedure, time.Since(start), err)
			return resp, err
		}
	})
	c, err := client.New([]string{"https://locks.internal:7443"},
		client.WithBearerToken(os.Getenv("LEASEGATE_TOKEN")),
		client.WithInterceptors(logCalls))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}
