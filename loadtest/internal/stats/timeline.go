package stats

import (
	"sync/atomic"
	"time"
)

// Timeline counts events in fixed steps of wall time, for throughput over
// time. Add is safe for concurrent use.
type Timeline struct {
	start   time.Time
	step    time.Duration
	buckets []atomic.Int64
}

// NewTimeline covers span from start in buckets of step; events after the
// span land in the last bucket.
func NewTimeline(start time.Time, step, span time.Duration) *Timeline {
	n := int(span/step) + 1
	return &Timeline{start: start, step: step, buckets: make([]atomic.Int64, n)}
}

// StepFor picks a bucket width that gives a phase of length d about 40
// points, at least 100 ms.
func StepFor(d time.Duration) time.Duration {
	return max(d/40, 100*time.Millisecond).Round(10 * time.Millisecond)
}

// Add counts one event at t; events before the start are dropped.
func (t *Timeline) Add(at time.Time) {
	i := int(at.Sub(t.start) / t.step)
	if i < 0 {
		return
	}
	t.buckets[min(i, len(t.buckets)-1)].Add(1)
}

// RatePoint is the event rate in one bucket, at its end.
type RatePoint struct {
	Sec    float64 `json:"t_s"`
	PerSec float64 `json:"per_s"`
}

// Rates returns the rate per bucket up to the elapsed time end, the last
// partial bucket scaled to its length.
func (t *Timeline) Rates(end time.Duration) []RatePoint {
	var out []RatePoint
	for i := range t.buckets {
		from := time.Duration(i) * t.step
		if from >= end {
			break
		}
		width := min(t.step, end-from)
		if width < t.step/4 {
			break // too short to say anything
		}
		out = append(out, RatePoint{
			Sec:    (from + width).Seconds(),
			PerSec: float64(t.buckets[i].Load()) / width.Seconds(),
		})
	}
	return out
}

// Jain is Jain's fairness index of xs: 1 when every client got the same, 1/n
// when one got everything. It is 1 for an empty or all-zero input.
func Jain(xs []int64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}
