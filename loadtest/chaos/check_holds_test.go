//go:build linux

package chaos

import (
	"strings"
	"testing"
)

func TestCheckHolds(t *testing.T) {
	const token = 1<<48 | 10
	retry := func(own bool, again string, count int, againToken int64) HoldOp {
		return HoldOp{Kind: holdRetry, Client: "r0", Name: "x", Op: 3, Token: token, Hold: "h1", Count: 2, Own: own,
			Again: again, AgainCount: count, AgainToken: againToken, Invoke: at(100), Complete: at(110)}
	}
	twice := func(answered, released, answeredAgain, releasedAgain bool) HoldOp {
		return HoldOp{Kind: holdRelease, Client: "r0", Name: "x", Op: 3, Token: token, Hold: "h1", Count: 2,
			Answered: answered, Released: released, AnsweredAgain: answeredAgain, ReleasedAgain: releasedAgain, Invoke: at(200), Complete: at(220)}
	}
	taken := func(hold string, count int, others ...string) HoldOp {
		return HoldOp{Kind: holdTaken, Client: "r0", Name: "x", Op: 3, Token: token, Hold: hold, Count: count, Others: others, Invoke: at(50), Complete: at(60)}
	}
	for _, tc := range []struct {
		name  string
		op    HoldOp
		check string // "" when no violation is due
	}{
		{"a re-entry granted a hold of its own", taken("h2", 2, "h1"), ""},
		{"a second re-entry granted a hold of its own", taken("h3", 3, "h1", "h2"), ""},
		{"a re-entry granted the lock's own lock id", taken("h1", 2, "h1"), checkHoldIdentity},
		{"a re-entry granted another hold's lock id", taken("h2", 3, "h1", "h2"), checkHoldIdentity},
		{"a re-entry counted twice", taken("h2", 3, "h1"), checkHoldIdentity},
		{"a retried re-entry answered the same hold", retry(false, "h1", 2, token), ""},
		{"a retried re-entry answered another hold", retry(false, "h2", 2, token), checkHoldRetry},
		{"a retried re-entry answered one more hold of the same id", retry(false, "h1", 3, token), checkHoldRetry},
		{"a retried first acquire answered its lock with another count", retry(true, "h1", 1, token), ""},
		{"a retried first acquire answered another lock id", retry(true, "h2", 2, token), checkHoldRetry},
		{"a retry granted another token: the lock was gone", retry(false, "h9", 1, token+5), ""},
		{"a retry not granted", retry(false, "", 0, 0), ""},
		{"a release sent twice: the second a no-op", twice(true, true, true, false), ""},
		{"a release sent twice: the second dropped a hold", twice(true, true, true, true), checkHoldRelease},
		{"a release sent twice after the hold was gone: the second dropped a hold", twice(true, false, true, true), checkHoldRelease},
		{"the first release unanswered: the second is the release", twice(false, false, true, true), ""},
		{"the second release unanswered", twice(true, true, false, false), ""},
	} {
		vs := checkHolds([]HoldOp{tc.op})
		switch {
		case tc.check == "" && len(vs) != 0:
			t.Errorf("%s: checkHolds = %v; want none", tc.name, vs)
		case tc.check != "" && (len(vs) != 1 || vs[0].Check != tc.check || len(vs[0].Ops) != 1 || vs[0].Ops[0] != 3):
			t.Errorf("%s: checkHolds = %v; want one %s violation about op 3", tc.name, vs, tc.check)
		}
	}
}

// TestCheckGrantsHolds: a re-entered lock's holds are its first grant's —
// no key of their own, no belief of their own — and a hold dropped twice,
// which frees the name while the worker still holds, is an overlap with the
// next holder.
func TestCheckGrantsHolds(t *testing.T) {
	first := grant(0, "r", "x", 10, 0, 100, 500)
	first.Role = "reentrant"
	hold := func(id int, req string, complete int) AcquireOp {
		op := grant(id, req, "x", 10, complete-5, complete, complete+50)
		op.Role = "re-entry"
		parent := 0
		op.HoldOf = &parent
		return op
	}
	h1, h2 := hold(1, "r-1", 150), hold(2, "r-2", 250)
	keys := append(keyEvents("c0", "x", "r", 1, 10, 50), keyEvents("c0", "x", "w", 1, 45, 70)...)
	ix := buildKeyIndex(keys, clockEvery("c0", 80), []string{"c0"})
	next := grant(3, "w", "x", 45, 440, 510, 600) // granted once the worker let go
	if vs := checkGrants([]AcquireOp{first, h1, h2, next}, ix); len(vs) != 0 {
		t.Errorf("checkGrants(a lock with two holds, then another holder) = %v; want none", vs)
	}
	// The same holds judged as grants of their own: keys they never had,
	// their lock's token under other request ids.
	free1, free2 := h1, h2
	free1.HoldOf, free2.HoldOf = nil, nil
	if vs := checkGrants([]AcquireOp{first, free1, free2, next}, ix); len(vs) == 0 {
		t.Errorf("checkGrants(holds without HoldOf) = none; want them judged as grants")
	}
	// A repeated release dropped the other holds and the key (deleted at
	// revision 50, 500 ms), and w was granted at 510 while the worker
	// still held until 700.
	still := first
	still.End = at(700)
	vs := checkGrants([]AcquireOp{still, h1, h2, next}, ix)
	if len(vs) != 1 || vs[0].Check != checkBelief || !strings.Contains(vs[0].Detail, "op 0 (r, reentrant)") {
		t.Errorf("checkGrants(the name freed under a hold) = %v; want one overlap with op 0", vs)
	}
}
