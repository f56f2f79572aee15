package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

func TestRESTShapesAndStatusCodes(t *testing.T) {
	t.Parallel()
	// A lapsed lock's name is taken again at once: the shapes, not the
	// wait after a loss, are under test.
	g := gwtest.Start(t, shared, gwtest.NoLossWait())
	// acquire: 200 acquired with lockId, fencingToken (a JSON number) and
	// an RFC 3339 UTC expiresAt.
	status, body := postJSON(t, g, "/api/v1/locks/acquire", `{"name":"process_order:42","ttlMs":30000,"clientId":"worker-7-uuid"}`)
	if status != http.StatusOK || body["acquired"] != true {
		t.Fatalf("acquire = %d %v", status, body)
	}
	lockID, _ := body["lockId"].(string)
	token, ok := body["fencingToken"].(float64)
	exp, _ := body["expiresAt"].(string)
	if lockID == "" || !ok || token <= 0 || !strings.HasSuffix(exp, "Z") {
		t.Fatalf("acquire body %v; want lockId, numeric fencingToken, expiresAt in UTC", body)
	}
	if at, err := time.Parse(time.RFC3339, exp); err != nil || time.Until(at) > 31*time.Second || time.Until(at) < 25*time.Second {
		t.Fatalf("expiresAt %q: %v; want about 30 s from now", exp, err)
	}
	// A second acquire of a held name: 200, acquired false, the holder's expiry.
	status, body = postJSON(t, g, "/api/v1/locks/acquire", `{"name":"process_order:42","ttlMs":30000,"clientId":"worker-8"}`)
	if status != http.StatusOK || body["acquired"] != false || body["expiresAt"] == nil || body["lockId"] != nil {
		t.Fatalf("acquire of a held name = %d %v; want acquired false with expiresAt", status, body)
	}
	// renew: 200 renewed.
	renew := fmt.Sprintf(`{"lockId":%q,"fencingToken":%d,"ttlMs":30000}`, lockID, int64(token))
	status, body = postJSON(t, g, "/api/v1/locks/renew", renew)
	if status != http.StatusOK || body["renewed"] != true || body["expiresAt"] == nil {
		t.Fatalf("renew = %d %v", status, body)
	}
	// release: 204, and again 204 (idempotent).
	release := fmt.Sprintf(`{"lockId":%q,"fencingToken":%d}`, lockID, int64(token))
	for i := 0; i < 2; i++ {
		if status, body = postJSON(t, g, "/api/v1/locks/release", release); status != http.StatusNoContent || body != nil {
			t.Fatalf("release #%d = %d %v; want 204 with no body", i+1, status, body)
		}
	}
	// renew after release: 409 released.
	if status, body = postJSON(t, g, "/api/v1/locks/renew", renew); status != http.StatusConflict || body["renewed"] != false || body["reason"] != "released" {
		t.Fatalf("renew after release = %d %v; want 409 released", status, body)
	}
	// renew after the lease lapsed and someone else took the name: 409 stolen.
	_, body = postJSON(t, g, "/api/v1/locks/acquire", `{"name":"stolen","ttlMs":5000}`)
	oldID, oldTok := body["lockId"].(string), int64(body["fencingToken"].(float64))
	revokeHolder(t, g, etcdClient(t), "stolen")
	if _, b2 := postJSON(t, g, "/api/v1/locks/acquire", `{"name":"stolen","ttlMs":5000}`); b2["acquired"] != true {
		t.Fatalf("re-acquire after lapse = %v", b2)
	}
	status, body = postJSON(t, g, "/api/v1/locks/renew", fmt.Sprintf(`{"lockId":%q,"fencingToken":%d,"ttlMs":5000}`, oldID, oldTok))
	if status != http.StatusConflict || body["reason"] != "stolen" {
		t.Fatalf("renew of a stolen lock = %d %v; want 409 stolen", status, body)
	}
	// A stale release never frees the new holder's lock.
	if status, _ = postJSON(t, g, "/api/v1/locks/release", fmt.Sprintf(`{"lockId":%q,"fencingToken":%d}`, oldID, oldTok)); status != http.StatusNoContent {
		t.Fatalf("stale release = %d; want 204", status)
	}
	d, err := g.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: "stolen"}))
	if err != nil || !d.Msg.Held || d.Msg.FencingToken <= oldTok {
		t.Fatalf("after a stale release Describe = %v, %v; want the new holder", d, err)
	}
}

func TestRESTBadInputNamesTheFieldAndDisturbsNothing(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	held := tryAcquire(t, g, "held")
	valid := LockIDOf(held)
	cases := []struct {
		path, body string
		status     int
		field      string
	}{
		{"acquire", `{"name":"x","ttlMs":30000`, 400, "body"},
		{"acquire", ``, 400, "body"},
		{"acquire", `null`, 400, "name"},
		{"acquire", `{"name":"x","ttlMs":"30000"}`, 400, "ttlMs"},
		{"acquire", `{"name":7,"ttlMs":30000}`, 400, "name"},
		{"acquire", `{"ttlMs":30000}`, 400, "name"},
		{"acquire", `{"name":"x"}`, 400, "ttlMs"},
		{"acquire", `{"name":"","ttlMs":30000}`, 400, "name"},
		{"acquire", `{"name":"` + strings.Repeat("n", 257) + `","ttlMs":30000}`, 400, "name"},
		{"acquire", `{"name":"a\u0000b","ttlMs":30000}`, 400, "name"},
		{"acquire", `{"name":"a\nb","ttlMs":30000}`, 400, "name"},
		{"acquire", `{"name":"x","ttlMs":0}`, 400, "ttlMs"},
		{"acquire", `{"name":"x","ttlMs":500}`, 400, "ttlMs"},
		{"acquire", `{"name":"x","ttlMs":90000000}`, 400, "ttlMs"},
		{"acquire", `{"name":"x","ttlMs":-5}`, 400, "ttlMs"},
		{"acquire", `{"name":"x","ttlMs":30000,"admin":true}`, 400, "admin"},
		// A proto spelling is named as sent, with the REST spelling.
		{"acquire", `{"name":"x","ttl_ms":30000}`, 400, "ttl_ms"},
		{"acquire", `{"name":"x","ttlMs":30000} {"again":1}`, 400, "body"},
		{"acquire", `{"name":"held","ttlMs":30000,"clientId":"` + strings.Repeat("c", 200) + `"}`, 400, "clientId"},
		{"renew", `{"fencingToken":1}`, 400, "lockId"},
		{"renew", `{"lockId":"not-base64!","fencingToken":1}`, 400, "lockId"},
		{"renew", `{"lockId":"AAAA","fencingToken":1}`, 400, "lockId"},
		{"renew", `{"lockId":"` + valid + `"}`, 400, "fencingToken"},
		{"renew", `{"lockId":"` + valid + `","fencingToken":1.5}`, 400, "fencingToken"},
		{"renew", `{"lockId":"` + valid + `","fencingToken":` + fmt.Sprint(held.FencingToken+1) + `}`, 403, ""},
		{"release", `{"lockId":"` + valid + `","fencingToken":` + fmt.Sprint(held.FencingToken-1) + `}`, 403, ""},
		{"release", `{"lockId":"` + strings.Repeat("A", 3000) + `","fencingToken":1}`, 400, "lockId"},
		{"release", `{"lockId":` + valid + `}`, 400, "body"},
	}
	for _, tc := range cases {
		status, body := postJSON(t, g, "/api/v1/locks/"+tc.path, tc.body)
		e, _ := body["error"].(map[string]any)
		if status != tc.status || e == nil || e["message"] == "" {
			t.Errorf("POST %s %.60q = %d %v; want %d with an error body", tc.path, tc.body, status, body, tc.status)
			continue
		}
		if tc.field != "" && e["field"] != tc.field {
			t.Errorf("POST %s %.60q names field %v; want %q", tc.path, tc.body, e["field"], tc.field)
		}
	}
	if _, body := postJSON(t, g, "/api/v1/locks/acquire", `{"name":"x","ttl_ms":30000}`); !strings.Contains(fmt.Sprint(body["error"]), `ttl_ms: is not a known field; the REST API spells it "ttlMs"`) {
		t.Errorf("a proto spelling's error = %v; want it named as sent, with the REST spelling", body["error"])
	}
	// Oversized body: 413; wrong method: 405; unknown endpoint: 404.
	big := `{"name":"x","ttlMs":30000,"clientId":"` + strings.Repeat("x", 70<<10) + `"}`
	if status, _ := postJSON(t, g, "/api/v1/locks/acquire", big); status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body = %d; want 413", status)
	}
	if resp, err := g.HTTP.Get(g.URL + "/api/v1/locks/acquire"); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET acquire = %v, %v; want 405", resp, err)
	} else {
		resp.Body.Close()
	}
	if status, _ := postJSON(t, g, "/api/v1/locks/steal", `{}`); status != http.StatusNotFound {
		t.Errorf("unknown endpoint = %d; want 404", status)
	}
	// Nothing held was disturbed.
	if _, err := g.Client.Renew(ctxT(t), connect.NewRequest(&v1.RenewRequest{LockId: held.LockId, FencingToken: held.FencingToken})); err != nil {
		t.Fatalf("the held lock after the bad requests: %v", err)
	}
}

// LockIDOf returns a grant's lock id.
func LockIDOf(g *v1.Granted) string { return g.LockId }

func TestHealthFollowsEtcd(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t)
	g := gwtest.Start(t, e)
	hc := g.HTTP
	check := connectHealth(hc, g.URL)
	waitHealth := func(want grpc_health_v1.HealthCheckResponse_ServingStatus, code int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := check.CallUnary(ctxT(t), connect.NewRequest(&grpc_health_v1.HealthCheckRequest{}))
			hr, herr := hc.Get(g.URL + "/healthz")
			if herr == nil {
				hr.Body.Close()
			}
			if err == nil && resp.Msg.Status == want && herr == nil && hr.StatusCode == code {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health never became %v / %d", want, code)
			}
			time.Sleep(200 * time.Millisecond) // health is cached for a second
		}
	}
	waitHealth(grpc_health_v1.HealthCheckResponse_SERVING, http.StatusOK)
	e.Stop()
	waitHealth(grpc_health_v1.HealthCheckResponse_NOT_SERVING, http.StatusServiceUnavailable)
	e.Restart()
	waitHealth(grpc_health_v1.HealthCheckResponse_SERVING, http.StatusOK)
}

func connectHealth(hc *http.Client, url string) *connect.Client[grpc_health_v1.HealthCheckRequest, grpc_health_v1.HealthCheckResponse] {
	return connect.NewClient[grpc_health_v1.HealthCheckRequest, grpc_health_v1.HealthCheckResponse](hc, url+"/grpc.health.v1.Health/Check", connect.WithGRPC())
}
