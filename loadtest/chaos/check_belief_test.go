//go:build linux

package chaos

import (
	"encoding/base64"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/queue"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

func TestBelief(t *testing.T) {
	a := grant(0, "a", "x", 10, 0, 100, 200)
	b := grant(1, "b", "x", 12, 50, 200, 300) // granted as a released: no overlap
	if vs := belief("x", []AcquireOp{a, b}); len(vs) != 0 {
		t.Errorf("belief(back to back) = %v; want none", vs)
	}
	// a's Context was done at 250, though it meant to release at 260.
	a2 := a
	a2.End, a2.DoneAt = at(260), at(250)
	b2 := b
	b2.Complete = at(240)
	vs := belief("x", []AcquireOp{a2, b2})
	if len(vs) != 1 || vs[0].Check != checkBelief || !strings.Contains(vs[0].Detail, "10ms before") {
		t.Errorf("belief(b granted 10ms before a's Context was done) = %v; want one overlap of 10ms", vs)
	}
	a2.DoneAt = at(240)
	if vs := belief("x", []AcquireOp{a2, b2}); len(vs) != 0 {
		t.Errorf("belief(b granted as a's Context was done) = %v; want none", vs)
	}
	// A leasectl holder: its command ran until the last process exited.
	lc := AcquireOp{ID: 2, Client: "leasectl-1", Role: "leasectl", Name: "x", RequestID: "c", Outcome: outGranted,
		Token: queue.Token(1, 14), Complete: at(310), End: at(500), DoneAt: at(500)}
	c := grant(3, "d", "x", 16, 320, 450, 600)
	vs = belief("x", []AcquireOp{a, b, lc, c})
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "leasectl-1") {
		t.Errorf("belief(a grant while a command ran) = %v; want one overlap with leasectl-1", vs)
	}
	// One grant resumed by a retry of the same acquire is not two holders.
	r1 := grant(4, "e", "y", 20, 0, 100, 300)
	r2 := grant(5, "e", "y", 20, 150, 200, 300)
	if vs := belief("y", []AcquireOp{r1, r2}); len(vs) != 0 {
		t.Errorf("belief(one grant, two ops) = %v; want none", vs)
	}
	// A raw holder whose grant arrived after its deadline never believed.
	late := grant(7, "g", "x", 32, 0, 260, 0)
	late.End, late.DoneAt = at(270), at(230)
	if vs := belief("x", []AcquireOp{a2, late}); len(vs) != 0 {
		t.Errorf("belief(grant after its deadline) = %v; want none", vs)
	}
	// A holder whose end is unknown (a paused holder process) is not judged.
	u := grant(6, "f", "x", 30, 0, 100, 0)
	u.End = time.Time{}
	if vs := belief("x", []AcquireOp{u, b}); len(vs) != 0 {
		t.Errorf("belief(unknown end) = %v; want none", vs)
	}
}

func TestEarlyLoss(t *testing.T) {
	ok := grant(0, "a", "x", 10, 0, 100, 0)
	ok.Lost, ok.LostProof, ok.DoneAt, ok.Deadline = true, false, at(2000), at(2000) // at its deadline
	proofLate := ok
	proofLate.LostProof, proofLate.DoneAt = true, at(2100) // proven gone after its deadline
	early := ok
	early.ID, early.LostProof, early.DoneAt = 1, true, at(900)
	vs := earlyLoss([]AcquireOp{ok, proofLate, early})
	if len(vs) != 1 || !strings.HasPrefix(vs[0].Detail, "op 1 ") {
		t.Errorf("earlyLoss = %v; want op 1 lost before its deadline", vs)
	}
}

func TestCheckThieves(t *testing.T) {
	keys := append(keyEvents("c0", "x", "v", 1, 10, 20), keyEvents("c0", "x", "v", 1, 30, 40)...)
	ix := buildKeyIndex(keys, clockEvery("c0", 50), []string{"c0"})
	victim := grant(0, "v", "x", 10, 0, 100, 150)
	victimID := 0
	thief := func(id int, rev int64, invoke int) AcquireOp {
		op := grant(id, "v", "x", rev, invoke, invoke+50, invoke+100)
		op.Client, op.Role, op.Victim = "adv-thief", "thief", &victimID
		return op
	}
	// Key 30 was created (≈ 300 ms) after the thief asked at 250: its own.
	if vs := checkThieves([]AcquireOp{victim, thief(1, 30, 250)}, ix); len(vs) != 0 {
		t.Errorf("checkThieves(a key of its own) = %v; want none", vs)
	}
	// Key 30 existed when the thief asked at 400.
	if vs := checkThieves([]AcquireOp{victim, thief(1, 30, 400)}, ix); len(vs) != 1 {
		t.Errorf("checkThieves(an older key) = %v; want one violation", vs)
	}
	// The victim's own grant.
	if vs := checkThieves([]AcquireOp{victim, thief(1, 10, 50)}, ix); len(vs) != 1 || !strings.Contains(vs[0].Detail, "the grant of op 0") {
		t.Errorf("checkThieves(the victim's token) = %v; want one violation", vs)
	}
	// The victim's wait taken over.
	v2 := AcquireOp{ID: 0, Client: "v", Name: "x", RequestID: "v", Outcome: outError, Reason: client.ReasonSuperseded.String()}
	refused := AcquireOp{ID: 1, Client: "adv-thief", Role: "thief", Name: "x", RequestID: "v", Outcome: outError, Victim: &victimID}
	if vs := checkThieves([]AcquireOp{v2, refused}, ix); len(vs) != 1 || !strings.Contains(vs[0].Detail, "takeover") {
		t.Errorf("checkThieves(victim superseded) = %v; want one violation", vs)
	}
}

func TestAdversaryViolations(t *testing.T) {
	ops := []AdversaryOp{
		{Adversary: "tamper", Action: "renew", Outcome: advRefused},
		{Adversary: "replay", Action: "release", Outcome: advNoop},
		{Adversary: "thief", Action: "acquire", Outcome: advFresh},
		{Adversary: "tamper", Action: "genuine renew", Outcome: advIntact},
		{Adversary: "tamper", Action: "renew", Outcome: advTransient},
		{Adversary: "tamper", Action: "release", Outcome: advAccepted, Got: "ok"},
		{Adversary: "session", Action: "keepalive", Outcome: advWrongCode, Got: "internal"},
	}
	vs := adversaryViolations(ops, nil)
	if len(vs) != 2 || !strings.Contains(vs[0].Detail, "took effect") || !strings.Contains(vs[1].Detail, "wrong code") {
		t.Errorf("adversaryViolations = %v; want the accepted call and the wrong code", vs)
	}
}

// TestTamper: every edited id differs from the original as the gateway
// reads it — its bytes, or its decoding failing.
func TestTamper(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	for i := range 2000 {
		raw := make([]byte, 20+rng.IntN(80))
		for j := range raw {
			raw[j] = byte(rng.IntN(256))
		}
		id := base64.RawURLEncoding.EncodeToString(raw)
		got, how := tamper(rng, id)
		if got == id {
			t.Fatalf("tamper(%q) = the same id (%s)", id, how)
		}
		if d, err := base64.RawURLEncoding.DecodeString(got); err == nil && string(d) == string(raw) {
			t.Fatalf("case %d: tamper(%q) = %q (%s), which decodes to the same bytes", i, id, got, how)
		}
	}
}

// TestMonoClock: a CLOCK_MONOTONIC reading taken in a child process lands,
// on this process's timeline, between the child's start and its exit.
func TestMonoClock(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := newMonoClock()
	if c.err > time.Millisecond {
		t.Errorf("mapping error %s; want under 1ms", c.err)
	}
	for range 3 {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), roleEnv+"=mono")
		before := time.Now()
		out, err := cmd.Output()
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatalf("the mono role printed %q", out)
		}
		if got := c.at(n); got.Before(before.Add(-c.err)) || got.After(after.Add(c.err)) {
			t.Errorf("the child's reading maps to %s, outside [%s, %s]", got.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
		}
	}
}

// blamed is the known bug a violation is put down to, excused or not.
func blamed(v Violation) string { return v.Known + v.Attributed }

func TestAttributeEarlyLosses(t *testing.T) {
	lost := grant(0, "a", "x", 10, 0, 100, 0)
	lost.Lost, lost.LostProof, lost.DoneAt, lost.End, lost.Deadline = true, true, at(3000), at(3010), at(3500)
	next := grant(1, "b", "x", 12, 100, 2990, 3100)
	ops := []AcquireOp{lost, next}
	pause := Injection{Kind: kindLeaderPause, Clusters: []string{"c0"}, Start: at(0), Heal: at(2900)}
	vs := append(earlyLoss(ops), belief("x", ops)...)
	if len(vs) != 2 {
		t.Fatalf("early loss and overlap: got %v", vs)
	}
	attributeEarlyLosses(vs, ops, []Injection{pause}, nil)
	for _, v := range vs {
		if blamed(v) != knownPausedLeaderRevokes {
			t.Errorf("%s: known = %q; want %q", v.Detail, blamed(v), knownPausedLeaderRevokes)
		}
		// The early loss is etcd's to answer for; the overlap is never
		// excused.
		if excused := v.Known != ""; excused != (v.Check == checkEarlyLoss) {
			t.Errorf("%s (%s): excused = %v; want only the early loss excused", v.Detail, v.Check, excused)
		}
	}
	// Another cluster's pause, one that resumed long before or just over
	// 2 s before, or one that resumed only after the loss, explains nothing.
	for _, in := range []Injection{
		{Kind: kindLeaderPause, Clusters: []string{"c1"}, Heal: at(2900)},
		{Kind: kindLeaderPause, Clusters: []string{"c0"}, Heal: at(500)},
		{Kind: kindLeaderPause, Clusters: []string{"c0"}, Heal: at(900)},
		{Kind: kindLeaderPause, Clusters: []string{"c0"}, Heal: at(3100)},
	} {
		vs := append(earlyLoss(ops), belief("x", ops)...)
		attributeEarlyLosses(vs, ops, []Injection{in}, nil)
		for _, v := range vs {
			if blamed(v) != "" {
				t.Errorf("pause of %v healed at %s: %s put down to %q", in.Clusters, ts(in.Heal), v.Detail, blamed(v))
			}
		}
	}
}

// A holder that released its lock without noticing that etcd had deleted
// its key is put down to the paused leader's revocations only when the
// history proves the deletion came after the resumption, within the
// stale-revoke window (2 s after the resumption, or after the last revoke
// the resumed member's log shows timing out: those land one etcd request
// timeout late), and before the holder began to release.
func TestAttributeDeletionUnderHolder(t *testing.T) {
	pause := Injection{Kind: kindLeaderPause, Clusters: []string{"c0"}, Start: at(2000), Heal: at(2900)}
	late := pause
	late.StaleRevokes = at(9900)
	for _, tc := range []struct {
		name   string
		pause  Injection
		create int64 // the holder's key; the rival's is two revisions later
		delRev int64 // revision r is committed at r×10 ms
		end    int   // the holder's release began, ms
		known  bool
	}{
		{"deleted 50 ms after the resumption, before the release", pause, 10, 295, 3100, true},
		{"seen deleted before the resumption", pause, 10, 280, 3100, false},
		{"deleted before the pause", pause, 10, 150, 3100, false},
		{"deleted by the release itself", pause, 10, 315, 3100, false},
		{"deleted 2.5 s after the resumption", pause, 10, 540, 5600, false},
		{"deleted 7 s after the resumption, no timed-out revoke logged", pause, 900, 995, 10100, false},
		{"deleted 7 s after the resumption, as the timed-out revokes land", late, 900, 995, 10100, true},
		{"deleted 1.5 s after the last timed-out revoke", late, 900, 1140, 11600, true},
		{"deleted 2.5 s after the last timed-out revoke", late, 900, 1240, 12600, false},
		{"deleted by the release itself, after timed-out revokes", late, 900, 1010, 10080, false},
	} {
		start := int(tc.create) * 10
		keys := append(keyEvents("c0", "x", "a", 1, tc.create, tc.delRev), keyEvents("c0", "x", "b", 1, tc.create+2, 1300)...)
		ix := buildKeyIndex(keys, clockEvery("c0", 1400), []string{"c0"})
		a := grant(0, "a", "x", tc.create, start-10, start, tc.end)
		b := grant(1, "b", "x", tc.create+2, start+100, tc.end-10, tc.end+100)
		ops := []AcquireOp{a, b}
		vs := belief("x", ops)
		if len(vs) != 1 {
			t.Fatalf("%s: belief = %v; want one overlap", tc.name, vs)
		}
		attributeEarlyLosses(vs, ops, []Injection{tc.pause}, ix)
		if got := blamed(vs[0]) == knownPausedLeaderRevokes; got != tc.known {
			t.Errorf("%s: known = %q; want put down to the bug: %v", tc.name, blamed(vs[0]), tc.known)
		}
	}
}

// withLimit returns ops recorded with limit n.
func withLimit(n int, ops ...AcquireOp) []AcquireOp {
	out := make([]AcquireOp, len(ops))
	for i, op := range ops {
		op.Limit = n
		out[i] = op
	}
	return out
}

func TestBeliefSemaphore(t *testing.T) {
	// Four holders of x, granted 10 ms apart, all believing until 400.
	hs := []AcquireOp{
		grant(0, "a", "x", 10, 0, 100, 400),
		grant(1, "b", "x", 11, 0, 110, 400),
		grant(2, "c", "x", 12, 0, 120, 400),
		grant(3, "d", "x", 13, 0, 130, 400),
	}
	for _, n := range []int{2, 3} {
		if vs := belief("x", withLimit(n, hs[:n]...)); len(vs) != 0 {
			t.Errorf("belief(%d holders at once, limit %d) = %v; want none", n, n, vs)
		}
		vs := belief("x", withLimit(n, hs[:n+1]...))
		if len(vs) != 1 || vs[0].Check != checkBelief || len(vs[0].Ops) != n+1 || vs[0].Ops[n] != hs[n].ID {
			t.Errorf("belief(%d holders at once, limit %d) = %v; want one violation naming all %d, op %d last", n+1, n, vs, n+1, hs[n].ID)
		}
		// The same holders judged as a lock's: every later one overlaps
		// every earlier one.
		if vs := belief("x", withLimit(1, hs[:n]...)); len(vs) != n*(n-1)/2 {
			t.Errorf("belief(%d holders at once, limit 1) = %v; want %d overlaps", n, vs, n*(n-1)/2)
		}
		// Unrecorded limits are a lock's.
		if vs := belief("x", hs[:n]); len(vs) != n*(n-1)/2 {
			t.Errorf("belief(%d holders at once, no limit recorded) = %v; want %d overlaps", n, vs, n*(n-1)/2)
		}
	}
	// A holder that let go makes room: a ends at 125, so d joins b and c.
	a := hs[0]
	a.End = at(125)
	if vs := belief("x", withLimit(3, a, hs[1], hs[2], hs[3])); len(vs) != 0 {
		t.Errorf("belief(a let go before d's grant, limit 3) = %v; want none", vs)
	}
	// One grant resumed by a retry of the same acquire is one holder.
	again := hs[1]
	again.ID = 9
	if vs := belief("x", withLimit(2, hs[0], hs[1], again)); len(vs) != 0 {
		t.Errorf("belief(one grant, two ops, limit 2) = %v; want none", vs)
	}
}

func TestAttributeSemaphoreOverlap(t *testing.T) {
	// A paused leader resumed at 110 and revoked a lease, proven at 140:
	// the overlap of three holders on a limit-2 name is put down to it,
	// whichever of the earlier holders lost early.
	inj := []Injection{{Kind: kindLeaderPause, Clusters: []string{"c0"}, Start: at(0), Heal: at(110)}}
	for _, lostOne := range []int{0, 1} {
		hs := withLimit(2, grant(0, "a", "x", 10, 0, 100, 400), grant(1, "b", "x", 11, 0, 105, 400), grant(2, "c", "x", 12, 0, 130, 400))
		hs[lostOne].Lost, hs[lostOne].LostProof, hs[lostOne].DoneAt, hs[lostOne].Deadline = true, true, at(140), at(2000)
		hs[lostOne].End = at(145)
		vs := belief("x", hs)
		if len(vs) != 1 {
			t.Fatalf("belief(three holders, limit 2) = %v; want one violation", vs)
		}
		attributeEarlyLosses(vs, hs, inj, nil)
		if blamed(vs[0]) != knownPausedLeaderRevokes {
			t.Errorf("attributeEarlyLosses(op %d lost after the resumption) = %+v; want it put down to %s", lostOne, vs[0], knownPausedLeaderRevokes)
		}
	}
}

// TestStaleRevokesFromMemberLog reads the last timed-out revoke of a
// resumed member from its zap log, within the window asked for, and
// ignores revokes that failed otherwise.
func TestStaleRevokesFromMemberLog(t *testing.T) {
	line := func(ts float64, msg, err string) string {
		return fmt.Sprintf(`{"level":"warn","ts":%.6f,"caller":"etcdserver/server.go:1","msg":%q,"lease-id":"4364a2308e996fdf","error":%q}`, ts, msg, err)
	}
	base := float64(at(0).UnixNano()) / 1e9
	log := strings.Join([]string{
		"=== a line of the harness's own",
		line(base+1, "failed to revoke lease", "etcdserver: request timed out"), // before the window
		line(base+7.2, "failed to revoke lease", "etcdserver: request timed out"),
		line(base+7.25, "failed to revoke lease", "etcdserver: request timed out"),
		line(base+7.3, "failed to revoke lease", "lease not found"),
		line(base+7.4, "failed to apply request", "etcdserver: request timed out"),
		`{"level":"warn","ts":` + "not json",
	}, "\n")
	got, ok := staleRevokesIn(strings.NewReader(log), at(2000), at(60000))
	if !ok || got.Sub(at(7250)).Abs() > time.Millisecond {
		t.Fatalf("staleRevokesIn = %s, %v; want %s", got, ok, at(7250))
	}
	if _, ok := staleRevokesIn(strings.NewReader(log), at(8000), at(60000)); ok {
		t.Errorf("staleRevokesIn found a timed-out revoke after the last one")
	}
}

// TestAttributeDeletionSeenBeforeRelease: the revision clock is sampled
// every 20 ms or so; a deletion the recorder received before the holder
// began to release is proved to precede the release even when no clock
// sample does.
func TestAttributeDeletionSeenBeforeRelease(t *testing.T) {
	pause := Injection{Kind: kindLeaderPause, Clusters: []string{"c0"}, Start: at(2000), Heal: at(2900), StaleRevokes: at(9900)}
	for _, tc := range []struct {
		name  string
		seen  int // ms; 0: unknown
		known bool
	}{
		{"seen 5 ms before the release began", 9995, true},
		{"seen after the release began", 10005, false},
		{"not seen", 0, false},
	} {
		// Revision 1000 is committed between 9991 and 10011 ms by the
		// clock (samples every 20 ms); the release began at 10000.
		var samples []ClockSample
		for i := 1; i <= 700; i++ {
			samples = append(samples, ClockSample{Cluster: "c0", Rev: int64(2 * i), Invoke: at(20 * i), Complete: at(20*i + 1)})
		}
		keys := append(keyEvents("c0", "x", "a", 1, 900, 1000), keyEvents("c0", "x", "b", 1, 910, 1300)...)
		if tc.seen != 0 {
			keys[1].Seen = at(tc.seen)
		}
		ix := buildKeyIndex(keys, samples, []string{"c0"})
		ops := []AcquireOp{grant(0, "a", "x", 900, 8990, 9000, 10000), grant(1, "b", "x", 910, 9100, 9990, 10100)}
		vs := belief("x", ops)
		if len(vs) != 1 {
			t.Fatalf("%s: belief = %v; want one overlap", tc.name, vs)
		}
		attributeEarlyLosses(vs, ops, []Injection{pause}, ix)
		if got := blamed(vs[0]) == knownPausedLeaderRevokes; got != tc.known {
			t.Errorf("%s: known = %q; want put down to the bug: %v", tc.name, blamed(vs[0]), tc.known)
		}
	}
}

// TestStaleRevokesStopAtTheNextPause: a member's timed-out revokes after a
// later pause of its cluster belong to that pause, not to the earlier one,
// whose window would otherwise cover the whole stretch between them.
func TestStaleRevokesStopAtTheNextPause(t *testing.T) {
	log := fmt.Sprintf(`{"level":"warn","ts":%.6f,"msg":"failed to revoke lease","error":"etcdserver: request timed out"}`,
		float64(at(47000).UnixNano())/1e9) + "\n"
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/c0-m0.log", []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	first := &Injection{Kind: kindLeaderPause, Target: "c0-m0", Clusters: []string{"c0"}, Start: at(0), Heal: at(2500)}
	second := &Injection{Kind: kindLeaderPause, Target: "c0-m0", Clusters: []string{"c0"}, Start: at(38000), Heal: at(40500)}
	other := &Injection{Kind: kindLinkDelay, Target: "g1->etcd", Start: at(20000), Heal: at(23000)}
	noteStaleRevokes([]*Injection{first, other, second}, func(m string) string { return dir + "/" + m + ".log" })
	if !first.StaleRevokes.IsZero() {
		t.Errorf("the first pause took the second one's timed-out revoke (%s)", first.StaleRevokes)
	}
	if second.StaleRevokes.IsZero() || second.StaleRevokes.Sub(at(47000)).Abs() > time.Millisecond {
		t.Errorf("second pause: StaleRevokes = %s; want %s", second.StaleRevokes, at(47000))
	}
}

// A genuine renewal after a tampered release that found the lock stolen
// (its lease gone) in a paused leader's stale-revoke window is the known
// etcd bug; one that found it released, or stolen outside the window or
// on another cluster, is a tampered call that took effect.
func TestAdversaryStolenAfterAPausedLeaderIsTheKnownBug(t *testing.T) {
	pause := Injection{Kind: kindLeaderPause, Clusters: []string{"c0"}, Start: at(0), Heal: at(2900)}
	renew := func(shard string, reason v1.ErrorReason, done int) AdversaryOp {
		return AdversaryOp{Adversary: "tamper", Action: "genuine renew after: release", Outcome: advAccepted,
			Got: "failed_precondition", Shard: shard, Reason: reason.String(), Invoke: at(done - 10), Complete: at(done)}
	}
	for _, tc := range []struct {
		op    AdversaryOp
		known bool
	}{
		{renew("c0", v1.ErrorReason_LOCK_STOLEN, 3000), true},
		{renew("c0", v1.ErrorReason_LOCK_RELEASED, 3000), false}, // a release's end: the tampered call freed it
		{renew("c1", v1.ErrorReason_LOCK_STOLEN, 3000), false},   // another cluster's pause
		{renew("c0", v1.ErrorReason_LOCK_STOLEN, 9000), false},   // after the window
		{renew("c0", v1.ErrorReason_LOCK_STOLEN, 2000), false},   // before the leader resumed
	} {
		vs := adversaryViolations([]AdversaryOp{tc.op}, []Injection{pause})
		if len(vs) != 1 {
			t.Fatalf("%+v: %d violations; want 1", tc.op, len(vs))
		}
		if got := vs[0].Known == knownPausedLeaderRevokes; got != tc.known {
			t.Errorf("shard %s, reason %s, at %s: put down to the known bug = %v; want %v", tc.op.Shard, tc.op.Reason, ts(tc.op.Complete), got, tc.known)
		}
	}
}
