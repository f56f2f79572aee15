package conformance_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/conformance"
	"github.com/leasegate/leasegate/internal/etcdtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(etcdtest.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// startHarness starts the conformance harness for t and stops it at
// cleanup.
func startHarness(t *testing.T) *conformance.Harness {
	t.Helper()
	h, err := conformance.Start(context.Background(), conformance.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

// TestConformanceGo runs every scenario of sdk/conformance/scenarios.json,
// in file order, with the Go SDK against one harness. A failing step fails
// the scenario's subtest, named by the scenario id, with the step's index.
func TestConformanceGo(t *testing.T) {
	f, err := loadScenarios()
	if err != nil {
		t.Fatal(err)
	}
	h := startHarness(t)
	runID := "conf-go-" + randomHex()
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	for _, sc := range f.Scenarios {
		t.Run(sc.ID, func(t *testing.T) {
			runScenario(t, h.Description(), hc, runID, sc)
		})
	}
}

func runScenario(t *testing.T, desc conformance.Description, hc *http.Client, runID string, sc scenario) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	r := &run{
		desc: desc, prefix: runID + "/" + sc.ID + "/", ctx: ctx, http: hc,
		clients: map[string]*client.Client{}, sessions: map[string]*client.Session{}, locks: map[string]*handle{},
		sources: map[string]*tokenBox{}, renewals: map[string]*renewLog{},
	}
	defer func() {
		r.cleanup()
		cancel()
	}()
	for i, s := range sc.Steps {
		t0 := time.Now()
		if err := r.do(s); err != nil {
			t.Fatalf("scenario %s step %d (%s): %v", sc.ID, i, s.Op, err)
		}
		if d := time.Since(t0); d > 100*time.Millisecond {
			t.Logf("step %d (%s) took %s", i, s.Op, d.Round(time.Millisecond))
		}
	}
}

// cleanup lets go of whatever a scenario left (all of it, when a step
// failed part way), then starts any gateway it stopped.
func (r *run) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, h := range r.locks {
		select {
		case <-h.done:
			if h.lock != nil && h.lock.Err() == nil {
				_ = h.lock.Release(ctx)
			}
		default:
		}
	}
	for _, s := range r.sessions {
		_ = s.Close(ctx)
	}
	for _, c := range r.clients {
		_ = c.Close()
	}
	r.ctx = ctx
	_ = r.control("POST", "/reset", nil, nil)
}

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
