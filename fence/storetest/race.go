package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasegate/leasegate/fence"
)

// RaceStore adapts a guard for the race checker. Its Write must, when the
// guard accepts the token, append the token to the resource's accept log and
// set the resource's data to it, both inside the fenced write, so that the
// log's order is the order in which the guard accepted tokens.
type RaceStore struct {
	// Write is one fenced write of token to resource.
	Write func(ctx context.Context, resource string, token int64) error
	// Accepted returns resource's accept log, oldest first.
	Accepted func(ctx context.Context, resource string) ([]int64, error)
	// Data returns the token of the write that set resource's data, and
	// false if no write did.
	Data func(ctx context.Context, resource string) (token int64, ok bool, err error)
}

// attempt is one fenced write and its outcome.
type attempt struct {
	token int64
	err   error
}

// RaceSizes says how hard to race.
type RaceSizes struct {
	// Writers is the number of concurrent writers.
	Writers int
	// Rounds is the number of fresh keys, each written once by every
	// writer at once.
	Rounds int
	// PerWriter is the number of writes of each writer on the one shared
	// key.
	PerWriter int
}

// Race races writers on the same keys, resources under prefix, and checks
// every outcome: tokens are accepted in non-decreasing order, exactly the
// writes reported as accepted are logged, every refusal is a stale token
// error naming a token that was accepted, and the data belongs to the
// highest token tried. It blocks until every writer is done.
func Race(t *testing.T, s RaceStore, prefix string, n RaceSizes) {
	t.Run("fresh-keys", func(t *testing.T) { raceFreshKeys(t, s, prefix+"/fresh", n) })
	t.Run("shared-key", func(t *testing.T) { raceSharedKey(t, s, prefix+"/shared", n) })
}

// raceFreshKeys starts all writers at once on a key nobody wrote yet, so the
// guard's first-insert path is contended too. Tokens are drawn from
// 1..writers, so ties (two writers holding the same grant) occur.
func raceFreshKeys(t *testing.T, s RaceStore, prefix string, n RaceSizes) {
	ctx := testCtx(t)
	rng := rand.New(rand.NewPCG(uint64(n.Rounds), uint64(n.Writers)))
	for r := range n.Rounds {
		res := fmt.Sprintf("%s/%d", prefix, r)
		start := make(chan struct{})
		results := make([]attempt, n.Writers)
		var wg sync.WaitGroup
		for i := range results {
			results[i].token = rng.Int64N(int64(n.Writers)) + 1
			wg.Go(func() {
				<-start
				results[i].err = s.Write(ctx, res, results[i].token)
			})
		}
		close(start)
		wg.Wait()
		checkRace(t, ctx, s, res, results)
		if t.Failed() {
			t.Fatalf("round %d of %d failed; tokens %v", r, n.Rounds, tokensOf(results))
		}
	}
}

// raceSharedKey has every writer take tokens from one counter, as from a
// lock service granting in turn, and write the one key with them: tokens are
// issued in order but arrive out of order. After each accepted write a
// writer writes again with the same token, as a holder does.
func raceSharedKey(t *testing.T, s RaceStore, res string, n RaceSizes) {
	ctx := testCtx(t)
	var next atomic.Int64
	perWriter := make([][]attempt, n.Writers)
	var wg sync.WaitGroup
	for i := range perWriter {
		wg.Go(func() {
			for range n.PerWriter {
				tok := next.Add(1)
				// Give other writers a chance to take later tokens
				// and overtake this one, as network delay would.
				runtime.Gosched()
				err := s.Write(ctx, res, tok)
				perWriter[i] = append(perWriter[i], attempt{tok, err})
				if err == nil && tok%2 == 0 {
					perWriter[i] = append(perWriter[i], attempt{tok, s.Write(ctx, res, tok)})
				}
			}
		})
	}
	wg.Wait()
	all := slices.Concat(perWriter...)
	checkRace(t, ctx, s, res, all)
	var refused int
	for _, a := range all {
		if a.err != nil {
			refused++
		}
	}
	t.Logf("%d writes on %s, %d refused as stale", len(all), res, refused)
}

// checkRace checks the outcome of racing writes of one resource:
//   - every write was accepted or refused as stale, with the right tokens,
//     and a refusal names a highest token that was in fact accepted;
//   - the guard accepted tokens in non-decreasing order: no lower token
//     after a higher one;
//   - exactly the writes reported as accepted are in the log (a refused
//     write left nothing behind);
//   - the data belongs to the highest accepted token, and the highest token
//     attempted was accepted.
func checkRace(t *testing.T, ctx context.Context, s RaceStore, res string, attempts []attempt) {
	t.Helper()
	var accepted, refused []attempt
	var maxTried int64 = -1
	for _, a := range attempts {
		maxTried = max(maxTried, a.token)
		var se *fence.StaleTokenError
		switch {
		case a.err == nil:
			accepted = append(accepted, a)
		case errors.As(a.err, &se) && errors.Is(a.err, fence.ErrStaleToken):
			if se.Resource != res || se.Token != a.token || se.Highest <= a.token {
				t.Errorf("write of %d refused with %+v; want Resource %q, Token %d, Highest > %d", a.token, se, res, a.token, a.token)
			}
			refused = append(refused, a)
		default:
			t.Errorf("write of %d: %v; want nil or a stale token error", a.token, a.err)
		}
	}
	log, err := s.Accepted(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(log); i++ {
		if log[i] < log[i-1] {
			t.Errorf("token %d accepted after %d (accept log position %d): a stale write got through", log[i], log[i-1], i)
			break
		}
	}
	if want := slices.Sorted(slices.Values(tokensOf(accepted))); !slices.Equal(slices.Sorted(slices.Values(log)), want) {
		t.Errorf("accept log holds %d writes, %d reported accepted; log %v, reported %v", len(log), len(want), log, want)
	}
	inLog := make(map[int64]bool, len(log))
	for _, tok := range log {
		inLog[tok] = true
	}
	for _, a := range refused {
		if se := (*fence.StaleTokenError)(nil); errors.As(a.err, &se) && !inLog[se.Highest] {
			t.Errorf("write of %d refused because of %d, which was never accepted", a.token, se.Highest)
		}
		if a.token == maxTried {
			t.Errorf("the highest token %d was refused: %v", a.token, a.err)
		}
	}
	data, ok, err := s.Data(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) > 0 {
		if last := log[len(log)-1]; !ok || data != last || last != maxTried {
			t.Errorf("data written by %d (present %v), last accepted %d, highest tried %d; want all equal", data, ok, last, maxTried)
		}
	}
}

func tokensOf(as []attempt) []int64 {
	out := make([]int64, len(as))
	for i, a := range as {
		out[i] = a.token
	}
	return out
}
