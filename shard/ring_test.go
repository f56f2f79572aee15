package shard

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

const ringSample = 100_000

// sampleNames returns n distinct, reproducible pseudo-random lock names.
func sampleNames(n int) []string {
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("lock/%d/%016x", i, rng.Uint64())
	}
	return names
}

func clusterNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("cluster-%c", 'a'+i)
	}
	return out
}

func mustRing(t testing.TB, clusters []string) *Ring {
	t.Helper()
	r, err := NewRing(clusters)
	if err != nil {
		t.Fatalf("NewRing(%q) = %v", clusters, err)
	}
	return r
}

func TestNewRingRejects(t *testing.T) {
	tests := []struct {
		clusters []string
		want     string // substring of the error
	}{
		{nil, "at least one cluster"},
		{[]string{}, "at least one cluster"},
		{[]string{"a", ""}, "empty"},
		{[]string{"a", "b", "a"}, `"a" is listed twice`},
	}
	for _, tt := range tests {
		_, err := NewRing(tt.clusters)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewRing(%q) = %v; want error containing %q", tt.clusters, err, tt.want)
		}
	}
}

func TestLocateMatchesScoreFormula(t *testing.T) {
	clusters := []string{"east", "west", "north"}
	r := mustRing(t, clusters)
	for _, name := range sampleNames(1000) {
		want, best := "", uint64(0)
		for _, c := range clusters {
			s := xxhash.Sum64([]byte(c + "\x00" + name))
			if s != Score(c, name) {
				t.Fatalf("Score(%q, %q) = %x; want %x", c, name, Score(c, name), s)
			}
			if want == "" || s > best {
				want, best = c, s
			}
		}
		if got := r.Locate(name); got != want {
			t.Fatalf("Locate(%q) = %q; want %q", name, got, want)
		}
	}
}

// A fixed vector pins the formula: if this changes, every deployed name moves.
func TestLocateStableAcrossReleases(t *testing.T) {
	r := mustRing(t, []string{"a", "b", "c"})
	got := ""
	for _, n := range []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"} {
		got += r.Locate(n)
	}
	const want = "cabcacca"
	if got != want {
		t.Fatalf("Locate over fixed names = %q; want %q", got, want)
	}
}

func TestLocateIgnoresClusterOrder(t *testing.T) {
	a := mustRing(t, []string{"a", "b", "c", "d"})
	b := mustRing(t, []string{"d", "b", "a", "c"})
	for _, name := range sampleNames(10_000) {
		if a.Locate(name) != b.Locate(name) {
			t.Fatalf("Locate(%q) differs with cluster order: %q vs %q", name, a.Locate(name), b.Locate(name))
		}
	}
}

func TestRingBalance(t *testing.T) {
	names := sampleNames(ringSample)
	for n := 2; n <= 8; n++ {
		r := mustRing(t, clusterNames(n))
		load := map[string]int{}
		for _, name := range names {
			load[r.Locate(name)]++
		}
		mean := float64(len(names)) / float64(n)
		maxLoad := 0
		for _, l := range load {
			maxLoad = max(maxLoad, l)
		}
		ratio := float64(maxLoad) / mean
		t.Logf("N=%d: max load %d, mean %.0f, max/mean %.4f", n, maxLoad, mean, ratio)
		if len(load) != n || ratio > 1.1 {
			t.Errorf("N=%d: loads %v; want %d clusters each ≤ 1.1 × mean %.0f", n, load, n, mean)
		}
	}
}

func TestRingAddMovesOnlyToNewCluster(t *testing.T) {
	names := sampleNames(ringSample)
	for n := 2; n <= 8; n++ {
		before := mustRing(t, clusterNames(n))
		after := mustRing(t, clusterNames(n+1))
		added := clusterNames(n + 1)[n]
		moved := 0
		for _, name := range names {
			from, to := before.Locate(name), after.Locate(name)
			if from == to {
				continue
			}
			moved++
			if to != added {
				t.Fatalf("N=%d→%d: %q moved %s→%s; want moves only to %s", n, n+1, name, from, to, added)
			}
		}
		want := 1 / float64(n+1)
		got := float64(moved) / float64(len(names))
		t.Logf("N=%d→%d: moved %.4f of names, ideal %.4f (%.2f%% off)", n, n+1, got, want, 100*(got-want)/want)
		if got < 0.9*want || got > 1.1*want {
			t.Errorf("N=%d→%d: moved %.4f of names; want %.4f ± 10%%", n, n+1, got, want)
		}
	}
}

func TestRingRemoveMovesOnlyRemovedNames(t *testing.T) {
	names := sampleNames(ringSample)
	for n := 3; n <= 9; n++ {
		all := clusterNames(n)
		before := mustRing(t, all)
		for _, gone := range []string{all[n%3], all[n-1]} {
			var rest []string
			for _, c := range all {
				if c != gone {
					rest = append(rest, c)
				}
			}
			after := mustRing(t, rest)
			for _, name := range names {
				from, to := before.Locate(name), after.Locate(name)
				if from != gone && from != to {
					t.Fatalf("N=%d, removing %s: %q moved %s→%s; want only %s's names to move", n, gone, name, from, to, gone)
				}
			}
		}
	}
}

func TestLocateDoesNotAllocate(t *testing.T) {
	r := mustRing(t, clusterNames(5))
	name := strings.Repeat("long-lock-name/", 10)
	if a := testing.AllocsPerRun(100, func() { r.Locate(name) }); a != 0 {
		t.Errorf("Locate allocates %v times per call; want 0", a)
	}
}

func BenchmarkLocate(b *testing.B) {
	names := sampleNames(1024)
	for _, n := range []int{3, 8} {
		r := mustRing(b, clusterNames(n))
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.Locate(names[i&1023])
				i++
			}
		})
	}
}
