package stats

import (
	"math"
	"testing"
	"time"
)

func TestSummary(t *testing.T) {
	h := NewHistogram()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	s := h.Summary()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"p50", s.P50Ms, 500}, {"p90", s.P90Ms, 900}, {"p99", s.P99Ms, 990}, {"p99.9", s.P999Ms, 999}, {"max", s.MaxMs, 1000}, {"mean", s.MeanMs, 500.5},
	} {
		if math.Abs(c.got-c.want) > c.want*0.002 {
			t.Errorf("%s = %v; want %v within 0.2%%", c.name, c.got, c.want)
		}
	}
	if s.Count != 1000 {
		t.Errorf("count = %d; want 1000", s.Count)
	}
}

func TestEmptyHistogram(t *testing.T) {
	h := NewHistogram()
	if s := h.Summary(); s != (Summary{}) {
		t.Errorf("Summary() of empty = %+v; want zero", s)
	}
	if h.Spectrum() != nil || h.Distribution(10) != nil {
		t.Error("empty histogram has a spectrum or distribution")
	}
}

func TestClamp(t *testing.T) {
	h := NewHistogram()
	h.Record(0)
	h.Record(time.Hour)
	if h.Count() != 2 {
		t.Fatalf("count = %d; want 2 (out-of-range values are clamped, not dropped)", h.Count())
	}
}

func TestSpectrumAndDistribution(t *testing.T) {
	h := NewHistogram()
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond * 10)
	}
	sp := h.Spectrum()
	if len(sp) < 10 || sp[len(sp)-1].Quantile != 1 {
		t.Fatalf("spectrum has %d points ending at %v; want more than 10 ending at q=1", len(sp), sp[len(sp)-1])
	}
	for i := 1; i < len(sp); i++ {
		if sp[i].Quantile <= sp[i-1].Quantile || sp[i].Ms < sp[i-1].Ms {
			t.Errorf("spectrum not monotone at %d: %v then %v", i, sp[i-1], sp[i])
		}
	}
	var n int64
	for _, b := range h.Distribution(10) {
		n += b.Count
		if b.HiMs <= b.LoMs {
			t.Errorf("bin %+v is empty or inverted", b)
		}
	}
	if n != h.Count() {
		t.Errorf("distribution holds %d values; want %d", n, h.Count())
	}
}

func TestTimeline(t *testing.T) {
	start := time.Unix(1000, 0)
	tl := NewTimeline(start, time.Second, 3*time.Second)
	for i := range 30 {
		tl.Add(start.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	tl.Add(start.Add(-time.Second)) // before the start: dropped
	rs := tl.Rates(3 * time.Second)
	if len(rs) != 3 {
		t.Fatalf("Rates = %v; want 3 points", rs)
	}
	for _, r := range rs {
		if r.PerSec != 10 {
			t.Errorf("rate at %vs = %v; want 10", r.Sec, r.PerSec)
		}
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []int64
		want float64
	}{
		{[]int64{5, 5, 5, 5}, 1},
		{[]int64{10, 0, 0, 0}, 0.25},
		{nil, 1},
		{[]int64{0, 0}, 1},
	} {
		if got := Jain(c.xs); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v; want %v", c.xs, got, c.want)
		}
	}
}
