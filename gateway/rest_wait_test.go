package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// restWaiter is a REST acquire that waits, run in the background.
type restWaiter struct {
	cancel context.CancelFunc
	done   chan struct{}
	status int
	body   map[string]any
	err    error
}

// startRESTWait posts body to the acquire endpoint in the background.
func startRESTWait(t *testing.T, g *gw, body string) *restWaiter {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	w := &restWaiter{cancel: cancel, done: make(chan struct{})}
	t.Cleanup(cancel)
	go func() {
		defer close(w.done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/api/v1/locks/acquire", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := g.HTTP.Do(req)
		if err != nil {
			w.err = err
			return
		}
		defer resp.Body.Close()
		w.status = resp.StatusCode
		w.err = json.NewDecoder(resp.Body).Decode(&w.body)
	}()
	return w
}

// wait returns the waiter's answer.
func (w *restWaiter) wait(t *testing.T) map[string]any {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the REST waiter did not answer within 30 s")
	}
	if w.err != nil || w.status != http.StatusOK {
		t.Fatalf("REST wait = %d %v, %v", w.status, w.body, w.err)
	}
	return w.body
}

// awaitWaiters waits until name has n waiters behind its holder.
func awaitWaiters(t *testing.T, g *gw, name string, n int64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s has %d waiters", name, n), func() bool {
		d, err := g.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: name}))
		return err == nil && d.Msg.Waiters == n
	})
}

// restHold takes name over REST and returns its release body.
func restHold(t *testing.T, g *gw, name string) string {
	t.Helper()
	status, body := postJSON(t, g, "/api/v1/locks/acquire", fmt.Sprintf(`{"name":%q,"ttlMs":60000}`, name))
	if status != http.StatusOK || body["acquired"] != true {
		t.Fatalf("acquire %s = %d %v", name, status, body)
	}
	return fmt.Sprintf(`{"lockId":%q,"fencingToken":%d}`, body["lockId"], int64(body["fencingToken"].(float64)))
}

func restRelease(t *testing.T, g *gw, release string) {
	t.Helper()
	if status, body := postJSON(t, g, "/api/v1/locks/release", release); status != http.StatusNoContent {
		t.Fatalf("release = %d %v", status, body)
	}
}

// streamWaiter opens a streaming Acquire of name and reads its first
// position.
func streamWaiter(t *testing.T, g *gw, name string) *connect.ServerStreamForClient[v1.AcquireResponse] {
	t.Helper()
	st, err := g.Client.Acquire(ctxT(t), connect.NewRequest(&v1.AcquireRequest{Name: name, TtlMs: 60000, WaitTimeoutMs: 30000}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if !st.Receive() || st.Msg().GetQueued() == nil {
		t.Fatalf("stream's first message = %v, %v; want a position", st.Msg(), st.Err())
	}
	return st
}

// streamGrant reads the stream up to its grant.
func streamGrant(t *testing.T, st *connect.ServerStreamForClient[v1.AcquireResponse]) *v1.Granted {
	t.Helper()
	for st.Receive() {
		if g := st.Msg().GetGranted(); g != nil {
			return g
		}
	}
	t.Fatalf("stream ended without a grant: %v", st.Err())
	return nil
}

func TestRESTWaitFIFOWithStreamingWaiters(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, nil)
	t.Run("REST first", func(t *testing.T) {
		release := restHold(t, g, "fifo-a")
		rw := startRESTWait(t, g, `{"name":"fifo-a","ttlMs":60000,"waitTimeoutMs":30000}`)
		awaitWaiters(t, g, "fifo-a", 1)
		st := streamWaiter(t, g, "fifo-a")
		awaitWaiters(t, g, "fifo-a", 2)
		restRelease(t, g, release)
		got := rw.wait(t)
		if got["acquired"] != true {
			t.Fatalf("REST waiter queued first = %v; want acquired", got)
		}
		// The stream is still waiting behind the REST holder.
		awaitWaiters(t, g, "fifo-a", 1)
		restRelease(t, g, fmt.Sprintf(`{"lockId":%q,"fencingToken":%d}`, got["lockId"], int64(got["fencingToken"].(float64))))
		if gr := streamGrant(t, st); gr.FencingToken <= int64(got["fencingToken"].(float64)) {
			t.Fatalf("stream's token %d is not above the REST waiter's %v", gr.FencingToken, got["fencingToken"])
		}
	})
	t.Run("stream first", func(t *testing.T) {
		release := restHold(t, g, "fifo-b")
		st := streamWaiter(t, g, "fifo-b")
		awaitWaiters(t, g, "fifo-b", 1)
		rw := startRESTWait(t, g, `{"name":"fifo-b","ttlMs":60000,"waitTimeoutMs":30000}`)
		awaitWaiters(t, g, "fifo-b", 2)
		restRelease(t, g, release)
		gr := streamGrant(t, st)
		select {
		case <-rw.done:
			t.Fatalf("REST waiter queued second answered before the stream's release: %v", rw.body)
		default:
		}
		awaitWaiters(t, g, "fifo-b", 1)
		if _, err := g.Client.Release(ctxT(t), connect.NewRequest(&v1.ReleaseRequest{LockId: gr.LockId, FencingToken: gr.FencingToken})); err != nil {
			t.Fatal(err)
		}
		if got := rw.wait(t); got["acquired"] != true {
			t.Fatalf("REST waiter queued second = %v; want acquired after the stream released", got)
		}
	})
}

func TestRESTWaitDisconnectLeavesQueue(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, nil)
	release := restHold(t, g, "gone")
	// The REST waiter's TTL (60 s) is past the test's bounds: the stream
	// behind it is granted only if its key is removed.
	rw := startRESTWait(t, g, `{"name":"gone","ttlMs":60000,"waitTimeoutMs":50000}`)
	awaitWaiters(t, g, "gone", 1)
	st := streamWaiter(t, g, "gone")
	awaitWaiters(t, g, "gone", 2)
	rw.cancel()
	<-rw.done
	awaitWaiters(t, g, "gone", 1)
	restRelease(t, g, release)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	got := make(chan *v1.Granted, 1)
	go func() {
		for st.Receive() {
			if gr := st.Msg().GetGranted(); gr != nil {
				got <- gr
				return
			}
		}
		close(got)
	}()
	select {
	case gr, ok := <-got:
		if !ok {
			t.Fatalf("stream ended without a grant: %v", st.Err())
		}
		_ = gr
	case <-ctx.Done():
		t.Fatal("the stream behind a disconnected REST waiter was not granted within 15 s")
	}
}

func TestRESTWaitTimeoutAnswersRefusal(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, nil)
	restHold(t, g, "slow")
	d, err := g.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: "slow"}))
	if err != nil || !d.Msg.Held {
		t.Fatalf("Describe = %v, %v", d, err)
	}
	start := time.Now()
	status, body := postJSON(t, g, "/api/v1/locks/acquire", `{"name":"slow","ttlMs":60000,"waitTimeoutMs":400}`)
	took := time.Since(start)
	if status != http.StatusOK || body["acquired"] != false || body["lockId"] != nil {
		t.Fatalf("wait on a held name = %d %v; want acquired false", status, body)
	}
	// The holder's expiry is read from its lease's remaining whole
	// seconds, so two reads differ by up to a second.
	exp, err := time.Parse(time.RFC3339Nano, fmt.Sprint(body["expiresAt"]))
	if want := d.Msg.HolderExpiresAt.AsTime(); err != nil || exp.Before(want.Add(-time.Second)) || exp.After(want.Add(time.Second)) {
		t.Fatalf("expiresAt %v, %v; want the holder's, about %s", body["expiresAt"], err, want)
	}
	if took < 400*time.Millisecond {
		t.Fatalf("answered after %s; want after the 400 ms wait", took)
	}
	awaitWaiters(t, g, "slow", 0)
}

func TestRESTWaitValidation(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, nil)
	for _, v := range []string{`-1`, `3600001`, `9223372036854775807`, `"5000"`, `1.5`, `1e30`, `true`} {
		status, body := postJSON(t, g, "/api/v1/locks/acquire", `{"name":"v","ttlMs":5000,"waitTimeoutMs":`+v+`}`)
		e, _ := body["error"].(map[string]any)
		if status != http.StatusBadRequest || e["field"] != "waitTimeoutMs" || !strings.Contains(fmt.Sprint(e["message"]), "waitTimeoutMs") {
			t.Errorf("waitTimeoutMs %s = %d %v; want 400 naming waitTimeoutMs", v, status, body)
		}
	}
	// 0 tries once, as a request without the field does.
	restHold(t, g, "v")
	for _, b := range []string{`{"name":"v","ttlMs":5000}`, `{"name":"v","ttlMs":5000,"waitTimeoutMs":0}`} {
		if status, body := postJSON(t, g, "/api/v1/locks/acquire", b); status != http.StatusOK || body["acquired"] != false {
			t.Fatalf("%s = %d %v; want acquired false at once", b, status, body)
		}
	}
	awaitWaiters(t, g, "v", 0)
}

// readmeCurls returns the README's curl commands, continuation lines
// joined.
func readmeCurls(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	cur := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur == "" && !strings.HasPrefix(line, "curl ") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		out = append(out, cur+line)
		cur = ""
	}
	return out
}

// TestREADMECurlExamples runs the README's curl commands with the real
// curl against a gateway, in order, the placeholders <lockId> and 4711
// filled from the first acquire's answer.
func TestREADMECurlExamples(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed")
	}
	g := startGatewayWith(t, nil)
	u, _ := url.Parse(g.URL)
	cmds := readmeCurls(t)
	want := map[string]string{
		"/api/v1/locks/acquire":              `"acquired":true`,
		"/api/v1/locks/renew":                `"renewed":true`,
		"/api/v1/locks/release":              "204",
		"/leasegate.v1.LockService/Describe": `"held":true`,
	}
	seen := map[string]int{}
	var lockID, token string
	var mu sync.Mutex
	for _, c := range cmds {
		if !strings.Contains(c, "localhost:7070") {
			continue
		}
		c = strings.ReplaceAll(c, "localhost:7070", u.Host)
		if lockID != "" {
			c = strings.ReplaceAll(strings.ReplaceAll(c, "<lockId>", lockID), `"fencingToken":4711`, `"fencingToken":`+token)
		}
		path := ""
		for p := range want {
			if strings.Contains(c, p) {
				path = p
			}
		}
		if path == "" {
			t.Fatalf("README curl %q calls no endpoint this test knows", c)
		}
		cmd := exec.Command("sh", "-c", strings.Replace(c, "curl ", curl+" ", 1))
		out, err := cmd.Output()
		mu.Lock()
		seen[path]++
		mu.Unlock()
		if err != nil || !strings.Contains(string(out), want[path]) {
			t.Fatalf("README curl %q = %q, %v; want %s", c, out, err, want[path])
		}
		if path == "/api/v1/locks/acquire" && lockID == "" {
			var a struct {
				LockID       string `json:"lockId"`
				FencingToken int64  `json:"fencingToken"`
			}
			if err := json.Unmarshal(out, &a); err != nil {
				t.Fatal(err)
			}
			lockID, token = a.LockID, fmt.Sprint(a.FencingToken)
		}
	}
	if seen["/api/v1/locks/acquire"] != 2 || len(seen) != len(want) {
		t.Fatalf("README curl examples run: %v; want the try and the waiting acquire, renew, release and Describe", seen)
	}
	var waited bool
	for _, c := range cmds {
		waited = waited || strings.Contains(c, `"waitTimeoutMs"`)
	}
	if !waited {
		t.Fatal("the README has no waiting acquire example")
	}
}

// TestRESTWaitOutlivesUnaryWriteDeadline waits longer than a unary
// call's write deadline (the fleet's RequestTimeout + SendTimeout, 600 ms
// here): the answer at the end of the wait must still arrive.
func TestRESTWaitOutlivesUnaryWriteDeadline(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, func(c *server.Config) {
		c.Fleet.RequestTimeout = 300 * time.Millisecond
		c.Gateway.SendTimeout = 300 * time.Millisecond
	})
	restHold(t, g, "long")
	status, body := postJSON(t, g, "/api/v1/locks/acquire", `{"name":"long","ttlMs":60000,"waitTimeoutMs":1500}`)
	if status != http.StatusOK || body["acquired"] != false || body["expiresAt"] == nil {
		t.Fatalf("a 1.5 s wait under a 600 ms unary write deadline = %d %v; want acquired false with expiresAt", status, body)
	}
}

// TestRESTWaitsCountAgainstTheTenantsWaitCap: a REST wait is one of the
// tenant's open waits, as a stream is, and a wait past the cap is refused
// at once; a REST try is not a wait.
func TestRESTWaitsCountAgainstTheTenantsWaitCap(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, func(c *server.Config) { c.Gateway.Limits.MaxWaitersPerTenant = 1 })
	restHold(t, g, "capped")
	rw := startRESTWait(t, g, `{"name":"capped","ttlMs":60000,"waitTimeoutMs":30000}`)
	awaitWaiters(t, g, "capped", 1)
	st, err := g.Client.Acquire(ctxT(t), connect.NewRequest(&v1.AcquireRequest{Name: "capped", TtlMs: 60000}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Receive() || connect.CodeOf(st.Err()) != connect.CodeResourceExhausted {
		t.Fatalf("a stream beside a REST wait under a cap of 1 = %v, %v; want resource_exhausted", st.Msg(), st.Err())
	}
	status, body := postJSON(t, g, "/api/v1/locks/acquire", `{"name":"capped","ttlMs":60000,"waitTimeoutMs":30000}`)
	if status != http.StatusTooManyRequests {
		t.Fatalf("a second REST wait under a cap of 1 = %d %v; want 429", status, body)
	}
	if status, body = postJSON(t, g, "/api/v1/locks/acquire", `{"name":"capped","ttlMs":60000}`); status != http.StatusOK || body["acquired"] != false {
		t.Fatalf("a REST try beside the cap = %d %v; want acquired false", status, body)
	}
	rw.cancel()
	<-rw.done
}

// TestRESTGrantAsTheClientLeavesIsGivenUp makes the grant land just as
// the REST waiter's client goes away: the gateway has noticed the closed
// connection when it comes to write the grant, gives the grant up, and
// the name is free again well within the waiter's 60 s TTL.
func TestRESTGrantAsTheClientLeavesIsGivenUp(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, nil)
	var rw *restWaiter
	gone := make(chan struct{})
	gateway.SetRESTGrantHook(g.Server.Service(), func(ctx context.Context) {
		rw.cancel()
		<-ctx.Done() // the server saw the connection close
		close(gone)
	})
	release := restHold(t, g, "leaving")
	rw = startRESTWait(t, g, `{"name":"leaving","ttlMs":60000,"waitTimeoutMs":30000}`)
	awaitWaiters(t, g, "leaving", 1)
	restRelease(t, g, release)
	<-gone
	<-rw.done
	if rw.err == nil {
		t.Fatalf("the client that left read an answer: %d %v", rw.status, rw.body)
	}
	eventually(t, "leaving is free", func() bool {
		d, err := g.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: "leaving"}))
		return err == nil && !d.Msg.Held && d.Msg.Waiters == 0
	})
}

// TestRESTWaitEndsAtShutdown: a stopping gateway ends a REST wait as it
// ends a stream's, with unavailable, rather than holding its stop for the
// wait's 30 s.
func TestRESTWaitEndsAtShutdown(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, nil)
	restHold(t, g, "stopping")
	rw := startRESTWait(t, g, `{"name":"stopping","ttlMs":60000,"waitTimeoutMs":30000}`)
	awaitWaiters(t, g, "stopping", 1)
	start := time.Now()
	g.Stop()
	<-rw.done
	e, _ := rw.body["error"].(map[string]any)
	if rw.err != nil || rw.status != http.StatusServiceUnavailable || e["code"] != "unavailable" {
		t.Fatalf("a REST wait on a stopping gateway = %d %v, %v; want 503 unavailable", rw.status, rw.body, rw.err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the stop took %s; want the wait ended at once", took)
	}
}
