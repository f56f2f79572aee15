package queue

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Audit records are bounded by count (the oldest beyond are deleted) and
// by age (older ones go with the next force-release), newest first.
func TestForceReleaseAuditRetention(t *testing.T) {
	clk := newFakeClock()
	e, _ := newEngine(t, func(c *Config) { c.Clock = clk })
	ret := AuditRetention{MaxRecords: 3, MaxAge: time.Hour}
	force := func(i int) {
		t.Helper()
		name := fmt.Sprintf("a%d", i)
		g := mustAcquire(t, e, req(name))
		res, err := e.ForceRelease(testCtx(t), ForceReleaseRequest{Name: name, Reason: fmt.Sprint(i), Actor: "t", Retention: ret})
		if err != nil || !res.Released || res.Evicted.Token != g.Token() || res.Record.EvictedToken != g.Token() {
			t.Fatalf("ForceRelease(%s) = %+v, %v", name, res, err)
		}
		clk.Advance(time.Minute)
	}
	reasons := func() []string {
		t.Helper()
		recs, more, err := e.ListAudit(testCtx(t), "", 10)
		if err != nil || more {
			t.Fatalf("ListAudit: %v, more %v", err, more)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.Reason)
		}
		return out
	}
	for i := range 5 {
		force(i)
	}
	if got, want := reasons(), []string{"4", "3", "2"}; !slices.Equal(got, want) {
		t.Fatalf("after 5 with a bound of 3: %v; want %v", got, want)
	}
	clk.Advance(time.Hour)
	force(5)
	if got, want := reasons(), []string{"5"}; !slices.Equal(got, want) {
		t.Fatalf("an hour later: %v; want %v (older than MaxAge dropped)", got, want)
	}
	// Paging: before an id lists the older ones.
	force(6)
	recs, _, err := e.ListAudit(testCtx(t), "", 1)
	if err != nil || len(recs) != 1 || recs[0].Reason != "6" {
		t.Fatalf("first page %v, %v", recs, err)
	}
	recs, _, err = e.ListAudit(testCtx(t), recs[0].ID, 1)
	if err != nil || len(recs) != 1 || recs[0].Reason != "5" {
		t.Fatalf("second page %v, %v", recs, err)
	}
}

func TestForceReleaseRefusals(t *testing.T) {
	e, _ := newEngine(t)
	g := mustAcquire(t, e, req("n"))
	for _, r := range []ForceReleaseRequest{
		{Name: "n", Reason: ""},
		{Name: "n", Reason: "bad\x01reason"},
		{Name: "", Reason: "r"},
	} {
		if _, err := e.ForceRelease(testCtx(t), r); err == nil {
			t.Errorf("ForceRelease(%+v) succeeded", r)
		}
	}
	_, err := e.ForceRelease(testCtx(t), ForceReleaseRequest{Name: "n", Reason: "r", Token: g.Token() + 1})
	if !errors.Is(err, ErrHolderChanged) {
		t.Fatalf("ForceRelease of another token = %v; want ErrHolderChanged", err)
	}
	if _, err := e.Renew(testCtx(t), g.Handle, g.Token()); err != nil {
		t.Fatalf("the holder lost its lock to a refused force-release: %v", err)
	}
	res, err := e.ForceRelease(testCtx(t), ForceReleaseRequest{Name: "free", Reason: "r"})
	if err != nil || res.Released {
		t.Fatalf("ForceRelease of a free name = %+v, %v", res, err)
	}
	mustRelease(t, e, g)
}

// TestForceReleaseStampsTheLockDelayOnItsOwnLease: an evicted holder's
// lock-delay holds from the eviction, and its record rides on a lease of
// its own that outlives the delay as any gateway reads it, so that a name
// nobody acquires again leaves nothing behind.
func TestForceReleaseStampsTheLockDelayOnItsOwnLease(t *testing.T) {
	e, cli := newEngine(t)
	r := req("evicted-delay")
	r.LockDelay = 20 * time.Second
	h := mustAcquire(t, e, r)
	if _, err := e.ForceRelease(testCtx(t), ForceReleaseRequest{Name: r.Name, Reason: "r", Actor: "op", Token: h.Token()}); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(testCtx(t), e.keys.delay(r.Name, h.WaiterID))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the delay record after the eviction = %v, %v; want one", resp, err)
	}
	kv := resp.Kvs[0]
	if rec, ok := parseDelay(kv); !ok || rec.expired.IsZero() || rec.d != r.LockDelay {
		t.Fatalf("the delay record %q is not stamped with the holder's %s", kv.Value, r.LockDelay)
	}
	if kv.Lease == 0 {
		t.Fatal("the stamped delay record rides on no lease: nobody but a sweep clears it")
	}
	ttl, err := cli.TimeToLive(testCtx(t), clientv3.LeaseID(kv.Lease))
	if err != nil {
		t.Fatal(err)
	}
	if want := r.LockDelay + e.cfg.MaxClockSkew; time.Duration(ttl.GrantedTTL)*time.Second <= want {
		t.Fatalf("the record's lease TTL is %d s; want more than the delay as another gateway reads it, %s", ttl.GrantedTTL, want)
	}
}
