package embedetcd

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// TestStartEndsWhenEtcdHangs: etcd's own start has no deadline (it waits
// without end for a database locked after Start's check), so Start stops
// waiting for it at StartTimeout or the end of its context, whichever
// comes first, and returns an error at once. The start it leaves behind
// keeps the directory until it ends, then closes the member it started
// (its ports are free again) and lets go of the directory.
func TestStartEndsWhenEtcdHangs(t *testing.T) {
	for _, tc := range []struct {
		end  string
		want error
	}{{"StartTimeout", errStartExpired}, {"the context", context.Canceled}} {
		t.Run(tc.end, func(t *testing.T) {
			cfg := member(t)
			ec, err := embedConfig(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			hung := make(chan struct{})
			released := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			expired := make(chan time.Time, 1)
			if tc.want == errStartExpired {
				expired <- time.Now()
			} else {
				cancel()
			}
			e, err := startWithin(ctx, func() (*embed.Etcd, error) {
				<-hung
				return embed.StartEtcd(ec)
			}, expired, func() { close(released) })
			if !errors.Is(err, tc.want) || e != nil {
				t.Fatalf("startWithin with a hung start and %s ended = %v, %v; want %v at once", tc.end, e, err, tc.want)
			}
			select {
			case <-released:
				t.Fatal("the directory was let go of while etcd's start still runs")
			default:
			}
			close(hung) // etcd's start goes on and returns a member
			select {
			case <-released:
			case <-time.After(time.Minute):
				t.Fatal("the left-behind start never let go of the directory")
			}
			l, err := net.Listen("tcp", cfg.ClientAddr)
			if err != nil {
				t.Fatalf("the member the left-behind start made still serves: %v", err)
			}
			l.Close()
		})
	}
}

// member is a complete configuration of a one-member cluster in a
// directory of t's.
func member(t *testing.T) MemberConfig {
	t.Helper()
	client, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return MemberConfig{Name: "m", Dir: t.TempDir(), ClientAddr: client, PeerAddr: peer, UnsafeNoFsync: true,
		InitialCluster: "m=" + (&url.URL{Scheme: "http", Host: peer}).String()}.withDefaults()
}
