package gateway_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// A second REST wait under the same client and request id is a retry of
// the first: it takes the first's place in the queue, and the first is
// answered at once with a conflict that says so (never a second place,
// never two grants). Whether the retry then stays or goes away, the name
// is never left blocked.
func TestARESTWaitRetriedUnderItsRequestIDTakesItsPlace(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, nil)
	for _, retryLeaves := range []bool{false, true} {
		t.Run(fmt.Sprintf("retry leaves %v", retryLeaves), func(t *testing.T) {
			name := fmt.Sprintf("retried-%v", retryLeaves)
			release := restHold(t, g, name)
			body := fmt.Sprintf(`{"name":%q,"ttlMs":60000,"waitTimeoutMs":30000,"clientId":"c","requestId":"r"}`, name)
			first := startRESTWait(t, g, body)
			awaitWaiters(t, g, name, 1)
			retry := startRESTWait(t, g, body)
			select {
			case <-first.done:
			case <-time.After(30 * time.Second):
				t.Fatal("the first wait was not answered within 30 s of its retry")
			}
			errBody, _ := first.body["error"].(map[string]any)
			if first.err != nil || first.status != http.StatusConflict || errBody["code"] != "aborted" {
				t.Fatalf("the first wait after its retry = %d %v, %v; want 409 aborted", first.status, first.body, first.err)
			}
			awaitWaiters(t, g, name, 1)
			if retryLeaves {
				retry.cancel()
				<-retry.done
				awaitWaiters(t, g, name, 0)
				restRelease(t, g, release)
			} else {
				restRelease(t, g, release)
				got := retry.wait(t)
				if got["acquired"] != true {
					t.Fatalf("the retry after the holder let go = %v; want acquired", got)
				}
				restRelease(t, g, fmt.Sprintf(`{"lockId":%q,"fencingToken":%d}`, got["lockId"], int64(got["fencingToken"].(float64))))
			}
			status, got := postJSON(t, g, "/api/v1/locks/acquire", fmt.Sprintf(`{"name":%q,"ttlMs":60000,"waitTimeoutMs":10000}`, name))
			if status != http.StatusOK || got["acquired"] != true {
				t.Fatalf("acquire %s after both waits = %d %v; want it granted", name, status, got)
			}
		})
	}
}
