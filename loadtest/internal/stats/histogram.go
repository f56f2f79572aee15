// Package stats records what a load test measures: latency histograms (HDR,
// so tails keep their precision at any count), throughput over time and
// fairness across clients.
package stats

import (
	"math"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

const (
	// lowest and highest are the trackable range in microseconds: 1 µs to
	// 10 minutes, longer than any bounded phase of a run.
	lowest  = 1
	highest = int64(10 * time.Minute / time.Microsecond)
	// sigFigs keeps every recorded value within 0.1% of the truth.
	sigFigs = 3
)

// Histogram is an HDR latency histogram with microsecond resolution. It is
// not safe for concurrent use: give each worker its own and Merge them.
type Histogram struct{ h *hdrhistogram.Histogram }

// NewHistogram returns an empty histogram covering 1 µs to 10 min.
func NewHistogram() *Histogram {
	return &Histogram{h: hdrhistogram.New(lowest, highest, sigFigs)}
}

// Record adds one latency; values outside the range are clamped to it.
func (h *Histogram) Record(d time.Duration) {
	us := max(min(d.Microseconds(), highest), lowest)
	_ = h.h.RecordValue(us) // in range by construction
}

// Merge adds every value of o.
func (h *Histogram) Merge(o *Histogram) { h.h.Merge(o.h) }

// Count is the number of values recorded.
func (h *Histogram) Count() int64 { return h.h.TotalCount() }

// Quantile returns the value at q in [0, 1], or 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.Count() == 0 {
		return 0
	}
	return time.Duration(h.h.ValueAtQuantile(q*100)) * time.Microsecond
}

// Summary is a histogram's headline figures, in milliseconds.
type Summary struct {
	Count  int64   `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// Summary returns count, mean, p50, p90, p99, p99.9 and max.
func (h *Histogram) Summary() Summary {
	if h.Count() == 0 {
		return Summary{}
	}
	return Summary{
		Count:  h.Count(),
		MeanMs: h.h.Mean() / 1000,
		P50Ms:  ms(h.Quantile(0.50)),
		P90Ms:  ms(h.Quantile(0.90)),
		P99Ms:  ms(h.Quantile(0.99)),
		P999Ms: ms(h.Quantile(0.999)),
		MaxMs:  float64(h.h.Max()) / 1000,
	}
}

// Point is one point of a latency spectrum: the fraction of values at or
// below Ms.
type Point struct {
	Quantile float64 `json:"q"`
	Ms       float64 `json:"ms"`
}

// Spectrum samples the latency at quantiles spaced evenly in
// log(1/(1−q)) — 0, 0.5, 0.68, 0.9, …, 0.9999 — so that the tail gets as many
// points as the body, and ends with the maximum. Quantiles finer than the
// count supports are left out.
func (h *Histogram) Spectrum() []Point {
	n := h.Count()
	if n == 0 {
		return nil
	}
	var out []Point
	for k := 0; k <= 40; k++ {
		q := 1 - math.Pow(10, -float64(k)/10)
		if k > 0 && 1/(1-q) > float64(n) {
			break
		}
		out = append(out, Point{Quantile: q, Ms: ms(h.Quantile(q))})
	}
	return append(out, Point{Quantile: 1, Ms: float64(h.h.Max()) / 1000})
}

// Bin is one bar of a distribution: Count values in [LoMs, HiMs).
type Bin struct {
	LoMs  float64 `json:"lo_ms"`
	HiMs  float64 `json:"hi_ms"`
	Count int64   `json:"count"`
}

// Distribution returns the values in log-spaced bins, perBin bins per
// decade, from the decade of the minimum to that of the maximum.
func (h *Histogram) Distribution(perDecade int) []Bin {
	if h.Count() == 0 {
		return nil
	}
	lo := math.Floor(math.Log10(float64(max(h.h.Min(), 1))))
	hi := math.Ceil(math.Log10(float64(h.h.Max()) + 1))
	nb := int(hi-lo) * perDecade
	edges := make([]float64, nb+1)
	for i := range edges {
		edges[i] = math.Pow(10, lo+float64(i)/float64(perDecade))
	}
	bins := make([]Bin, nb)
	for i := range bins {
		bins[i] = Bin{LoMs: edges[i] / 1000, HiMs: edges[i+1] / 1000}
	}
	for _, b := range h.h.Distribution() {
		if b.Count == 0 {
			continue
		}
		v := float64(b.From+b.To) / 2
		i := int(math.Floor((math.Log10(max(v, 1)) - lo) * float64(perDecade)))
		bins[min(max(i, 0), nb-1)].Count += b.Count
	}
	return bins
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
