package ui

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric families the overview reads (docs/observability.md).
const (
	handoffMetric = "leasegate_handoff_duration_seconds"
	renewMetric   = "leasegate_renew_duration_seconds"
	// rpcMetric is otelconnect's server duration histogram; its count
	// with rpc_method KeepAliveSession is the session keepalives.
	rpcMetric = "rpc_server_duration_milliseconds"
)

// Histogram is a cumulative latency histogram in Prometheus's form.
type Histogram struct {
	// Bounds are the buckets' upper bounds in seconds, ascending; the last
	// bucket (+Inf) is Count.
	Bounds []float64 `json:"bounds"`
	// Cumulative[i] counts observations at most Bounds[i].
	Cumulative []uint64 `json:"cumulative"`
	// Count and Sum are the number and the sum (seconds) of observations.
	Count uint64  `json:"count"`
	Sum   float64 `json:"sum"`
}

// metricValues is what the overview takes from one gather.
type metricValues struct {
	handoff           *Histogram
	renewals          map[string]int64 // by shard
	sessionKeepalives int64
}

func readMetrics(g prometheus.Gatherer) (metricValues, error) {
	fams, err := g.Gather()
	mv := metricValues{renewals: map[string]int64{}}
	if err != nil && len(fams) == 0 {
		return mv, err
	}
	for _, f := range fams {
		switch f.GetName() {
		case handoffMetric:
			for _, m := range f.GetMetric() {
				mv.handoff = addHistogram(mv.handoff, m.GetHistogram())
			}
		case renewMetric:
			for _, m := range f.GetMetric() {
				mv.renewals[label(m, "shard")] += int64(m.GetHistogram().GetSampleCount())
			}
		case rpcMetric:
			for _, m := range f.GetMetric() {
				if label(m, "rpc_method") == "KeepAliveSession" {
					mv.sessionKeepalives += int64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return mv, nil
}

// addHistogram adds h to acc; series of one family share their bounds.
func addHistogram(acc *Histogram, h *dto.Histogram) *Histogram {
	if h == nil {
		return acc
	}
	if acc == nil {
		acc = &Histogram{}
		for _, b := range h.GetBucket() {
			acc.Bounds = append(acc.Bounds, b.GetUpperBound())
		}
		acc.Cumulative = make([]uint64, len(acc.Bounds))
	}
	for i, b := range h.GetBucket() {
		if i < len(acc.Cumulative) {
			acc.Cumulative[i] += b.GetCumulativeCount()
		}
	}
	acc.Count += h.GetSampleCount()
	acc.Sum += h.GetSampleSum()
	return acc
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
