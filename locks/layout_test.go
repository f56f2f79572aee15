package locks

import (
	"errors"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/shard"
)

// A running gateway whose layout record comes to name another layout
// reads as not ready (every shard's Ping reports the refusal) until the
// record is this build's again.
func TestALayoutRecordOfAnotherLayoutMakesTheRouterNotReady(t *testing.T) {
	a := etcdtest.Start(t)
	cfg := DefaultRouterConfig()
	cfg.Prefix = "/layout-watch"
	r, err := NewRouter(testCtx(t), a.Client(), shard.Map{Epoch: shard.MinEpoch, Clusters: []shard.Cluster{{Name: "a", Endpoints: []string{a.Endpoint()}}}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	ping := func() error {
		for _, h := range r.Ping(testCtx(t)) {
			if h.Err != nil {
				return h.Err
			}
		}
		return nil
	}
	if err := ping(); err != nil {
		t.Fatalf("Ping = %v; want every shard ok", err)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, err := a.Client().Put(testCtx(t), "/layout-watch/layout", "2"); err != nil {
		t.Fatal(err)
	}
	until("the router hears the refusal", func() bool { return r.LayoutRefused() != nil })
	if err := ping(); !errors.Is(err, shard.ErrLayout) {
		t.Fatalf("Ping under layout 2 = %v; want every shard reporting ErrLayout", err)
	}
	if _, err := a.Client().Put(testCtx(t), "/layout-watch/layout", "1"); err != nil {
		t.Fatal(err)
	}
	until("the router follows the map again", func() bool { return r.LayoutRefused() == nil })
	if err := ping(); err != nil {
		t.Fatalf("Ping once the record is this build's again = %v; want ok", err)
	}
}
