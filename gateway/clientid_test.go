package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// hostileClientIDs are client ids that would forge rows or reach an
// operator's terminal as commands, were they stored and printed raw.
var hostileClientIDs = []string{
	"worker\nholder-2  99  -",      // a newline forges a row
	"\x1b]0;pwned\x07\x1b[2J",      // escape sequences: title, clear screen
	"a\rb", "tab\there", "nul\x00", // other C0 controls
	"c1\u009b31m", "del\x7f", // a C1 CSI and DEL
	"bidi\u202eexe.gpj", "zw\u200b", // a bidi override, a zero-width space
	"nbsp\u00a0", "replacement \ufffd",
}

// Every call that stores a client id refuses one with a control or
// non-printable character, naming the field, before anything reaches
// etcd: Acquire, TryAcquire, OpenSession, Campaign and REST acquire.
func TestClientIDsWithControlCharactersAreRefused(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ec := electionClient(g)
	for i, id := range hostileClientIDs {
		name := fmt.Sprintf("cid-%d", i)
		_, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 10000, ClientId: id}))
		if codeOf(err) != connect.CodeInvalidArgument || violatedField(err) != "client_id" {
			t.Errorf("TryAcquire with client id %q = %v (field %q); want invalid_argument naming client_id", id, err, violatedField(err))
		}
		w := startWaiter(t, g, &v1.AcquireRequest{Name: name, TtlMs: 10000, ClientId: id})
		if err := <-w.err; codeOf(err) != connect.CodeInvalidArgument || violatedField(err) != "client_id" {
			t.Errorf("Acquire with client id %q = %v; want invalid_argument naming client_id", id, err)
		}
		_, err = g.Client.OpenSession(ctxT(t), connect.NewRequest(&v1.OpenSessionRequest{TtlMs: 10000, ClientId: id}))
		if codeOf(err) != connect.CodeInvalidArgument || violatedField(err) != "client_id" {
			t.Errorf("OpenSession with client id %q = %v; want invalid_argument naming client_id", id, err)
		}
		stream, err := ec.Campaign(ctxT(t), connect.NewRequest(&v1.CampaignRequest{Name: name, TtlMs: 10000, ClientId: id}))
		if err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
			stream.Close()
		}
		if codeOf(err) != connect.CodeInvalidArgument || violatedField(err) != "client_id" {
			t.Errorf("Campaign with client id %q = %v; want invalid_argument naming client_id", id, err)
		}
		body, _ := json.Marshal(map[string]any{"name": name, "ttlMs": 10000, "clientId": id})
		status, out := postJSON(t, g, "/api/v1/locks/acquire", string(body))
		if e, _ := out["error"].(map[string]any); status != http.StatusBadRequest || e["field"] != "clientId" || !strings.Contains(fmt.Sprint(e["message"]), "client id") {
			t.Errorf("REST acquire with client id %q = %d %v; want 400 naming clientId", id, status, out)
		}
		d, err := g.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: name}))
		if err != nil || d.Msg.Held {
			t.Errorf("%q after the refusals: %v, %v; want free", name, d, err)
		}
	}
	// Printable ids, spaces and non-Latin letters included, are fine.
	for _, id := range []string{"", "worker 7", "host-1:4242", "ワーカー", "naïve/ü"} {
		if _, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "cid-ok", TtlMs: 10000, ClientId: id})); err != nil && codeOf(err) == connect.CodeInvalidArgument {
			t.Errorf("TryAcquire with client id %q = %v", id, err)
		}
	}
}
