package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/shard"
)

// A bad request is refused invalid_argument, naming its field, before it
// is routed: with its only cluster stopped and that cluster's breaker
// open, every call that carries a field the engine would refuse is
// answered so, over Connect and REST, and never unavailable.
func TestBadRequestsRefusedWithTheClusterDown(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 1)
	opened := make(chan struct{}, 1)
	bc := shard.DefaultBreakerConfig()
	bc.OpenTimeout = time.Minute // open for the rest of the test: no probe reaches the cluster
	bc.OnStateChange = func(_ string, _, to shard.State) {
		if to == shard.StateOpen {
			select {
			case opened <- struct{}{}:
			default:
			}
		}
	}
	g := f.gateway(t, func(c *server.Config) { c.Fleet.Breaker = bc }, 0)
	ec := electionClient(g)
	sess, err := g.Client.OpenSession(ctxT(t), connect.NewRequest(&v1.OpenSessionRequest{TtlMs: 30000}))
	if err != nil {
		t.Fatal(err)
	}
	leader := campaign(t, ec, &v1.CampaignRequest{Name: "dead-election", TtlMs: 30000})
	f.etcds[0].Stop()

	// Good calls fail until the breaker opens.
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), deadBound)
		_, err := g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "dead-good", TtlMs: 5000}))
		cancel()
		if codeOf(err) != connect.CodeUnavailable {
			t.Fatalf("TryAcquire %d with the cluster stopped = %v; want unavailable", i, err)
		}
		select {
		case <-opened:
		default:
			if i < 100 {
				continue
			}
			t.Fatalf("the breaker did not open after %d failed calls", i+1)
		}
		break
	}

	long := strings.Repeat("r", v1.MaxIDBytes+1)
	try := func(m *v1.TryAcquireRequest) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := g.Client.TryAcquire(ctx, connect.NewRequest(m))
			return err
		}
	}
	for _, tc := range []struct {
		what  string
		field string
		call  func(ctx context.Context) error
	}{
		{"TryAcquire, a client id with a control character", "client_id", try(&v1.TryAcquireRequest{Name: "d", ClientId: "nul\x00"})},
		{"TryAcquire, a request id over the limit", "request_id", try(&v1.TryAcquireRequest{Name: "d", RequestId: long})},
		{"TryAcquire, a limit above the maximum", "limit", try(&v1.TryAcquireRequest{Name: "d", Limit: v1.MaxSemaphoreLimit + 1})},
		{"TryAcquire, a negative limit", "limit", try(&v1.TryAcquireRequest{Name: "d", Limit: -1})},
		{"TryAcquire, reentrant without a session", "reentrant", try(&v1.TryAcquireRequest{Name: "d", Reentrant: true})},
		{"TryAcquire, an empty name", "name", try(&v1.TryAcquireRequest{})},
		{"TryAcquire, a negative lock delay", "lock_delay_ms", try(&v1.TryAcquireRequest{Name: "d", LockDelayMs: -1})},
		{"TryAcquire existing_only, a request id over the limit", "request_id", try(&v1.TryAcquireRequest{Name: "d", RequestId: long, ExistingOnly: true})},
		{"Acquire, a client id over the limit", "client_id", func(ctx context.Context) error {
			s, err := g.Client.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: "d", ClientId: long}))
			if err != nil {
				return err
			}
			defer s.Close()
			for s.Receive() {
			}
			return s.Err()
		}},
		{"Campaign, a value over the limit", "value", func(ctx context.Context) error {
			s, err := ec.Campaign(ctx, connect.NewRequest(&v1.CampaignRequest{Name: "d", Value: make([]byte, v1.MaxValueBytes+1)}))
			if err != nil {
				return err
			}
			defer s.Close()
			for s.Receive() {
			}
			return s.Err()
		}},
		{"Proclaim, a value over the limit", "value", func(ctx context.Context) error {
			_, err := ec.Proclaim(ctx, connect.NewRequest(&v1.ProclaimRequest{LeaderId: leader.LeaderId, Value: make([]byte, v1.MaxValueBytes+1)}))
			return err
		}},
		{"OpenSession, a client id with a control character", "client_id", func(ctx context.Context) error {
			_, err := g.Client.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: "a\nb"}))
			return err
		}},
		{"ExtendSession, a client id with a control character", "client_id", func(ctx context.Context) error {
			_, err := g.Client.ExtendSession(ctx, connect.NewRequest(&v1.ExtendSessionRequest{SessionId: sess.Msg.SessionId, Shards: []string{"c0"}, Replace: true, ClientId: "a\nb"}))
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), deadBound)
		err := tc.call(ctx)
		cancel()
		if codeOf(err) != connect.CodeInvalidArgument || violatedField(err) != tc.field {
			t.Errorf("%s with the cluster down = %v (field %q); want invalid_argument naming %s", tc.what, err, violatedField(err), tc.field)
		}
	}
	// REST names the field in its own spelling.
	body, _ := json.Marshal(map[string]any{"name": "d", "ttlMs": 5000, "requestId": long})
	status, out := postJSON(t, g, "/api/v1/locks/acquire", string(body))
	if e, _ := out["error"].(map[string]any); status != http.StatusBadRequest || e["field"] != "requestId" || !strings.HasPrefix(errMessage(out), "requestId: ") {
		t.Errorf("REST acquire, a request id over the limit, with the cluster down = %d %v; want 400 naming requestId", status, out)
	}
}
