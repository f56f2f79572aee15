package report

import (
	"fmt"
	"math"

	"github.com/leasegate/leasegate/loadtest/internal/chart"
	"github.com/leasegate/leasegate/loadtest/internal/scenario"
	"github.com/leasegate/leasegate/loadtest/internal/stats"
)

// Chart is one rendered chart: its file name and caption.
type Chart struct {
	File    string
	Caption string
	SVG     []byte
}

// Charts renders every chart the results have data for.
func Charts(r *Results) []Chart {
	var out []Chart
	add := func(file, caption string, c chart.Line) {
		if len(c.Series) > 0 {
			out = append(out, Chart{File: file, Caption: caption, SVG: c.SVG()})
		}
	}
	if u := r.Uncontested; u != nil {
		add("uncontested-latency-serial.svg", "Uncontested cycle latency, one client: percentile spectrum per system",
			spectrumChart("Uncontested acquire+release, 1 client", runSpectra(u.Serial)))
		add("uncontested-latency.svg", fmt.Sprintf("Uncontested cycle latency, %d clients: percentile spectrum per system", r.Config.Workers),
			spectrumChart(fmt.Sprintf("Uncontested acquire+release, %d clients", r.Config.Workers), runSpectra(u.Concurrent)))
		add("uncontested-throughput.svg", fmt.Sprintf("Uncontested cycles per second over time, %d clients", r.Config.Workers),
			timelineChart(fmt.Sprintf("Throughput over time, %d clients", r.Config.Workers), "cycles/s", u.Concurrent))
	}
	if o := r.OpenLoop; o != nil && len(o.Runs) > 0 {
		var runs []scenario.Run
		for _, x := range o.Runs {
			runs = append(runs, x.Run)
		}
		add("openloop-latency.svg", fmt.Sprintf("Open loop at %.0f cycles/s: latency from the intended start", o.Runs[0].Rate),
			spectrumChart(fmt.Sprintf("Open loop, %.0f/s, latency from intended start", o.Runs[0].Rate), runSpectra(runs)))
		add("openloop-throughput.svg", "Open loop: completed cycles per second over time",
			timelineChart("Open loop: completions over time", "cycles/s", runs))
	}
	if c := r.Contended; c != nil && len(c.Runs) > 0 {
		var ss []chart.Series
		var sp []named
		for _, x := range c.Runs {
			ss = append(ss, binSeries(x.System, x.HandoffBins))
			sp = append(sp, named{x.System, x.HandoffSpectrum})
		}
		add("contended-handoff.svg", "Handoff latency distribution (release → next waiter granted): share of handoffs per bin",
			chart.Line{Title: "Handoff latency distribution", X: chart.Axis{Label: "handoff latency (ms, log)", Log: true},
				Y: chart.Axis{Label: "share of handoffs"}, Series: ss})
		add("contended-handoff-spectrum.svg", "Handoff latency: percentile spectrum per system",
			spectrumChart("Handoff latency, percentile spectrum", sp))
	}
	if cp := r.Capacity; cp != nil && len(cp.Samples) > 1 {
		var held, rss, heap []float64
		for _, s := range cp.Samples {
			held = append(held, float64(s.Held))
			rss = append(rss, float64(s.RSSBytes)/(1<<20))
			heap = append(heap, float64(s.HeapB)/(1<<20))
		}
		add("capacity-memory.svg", "Capacity fill: process memory against locks held",
			chart.Line{Title: "Memory against held locks", X: chart.Axis{Label: "locks held"}, Y: chart.Axis{Label: "MiB"},
				Series: []chart.Series{{Name: "resident set (RSS)", X: held, Y: rss}, {Name: "Go heap in use", X: held, Y: heap}}})
	}
	return out
}

type named struct {
	name string
	pts  []stats.Point
}

func runSpectra(runs []scenario.Run) []named {
	var out []named
	for _, r := range runs {
		out = append(out, named{r.System, r.Spectrum})
	}
	return out
}

// nines maps a quantile to its position on a "number of nines" axis:
// 0 → 0, 0.9 → 1, 0.99 → 2 …; the maximum sits half a step past the last
// finite quantile.
func nines(q float64) float64 { return -math.Log10(1 - q) }

func spectrumChart(title string, ns []named) chart.Line {
	c := chart.Line{
		Title: title,
		X: chart.Axis{Label: "percentile", Ticks: []chart.Tick{
			{V: 0, Label: "0%"}, {V: 1, Label: "90%"}, {V: 2, Label: "99%"}, {V: 3, Label: "99.9%"}, {V: 4, Label: "99.99%"}, {V: 5, Label: "max"},
		}, Min: 0, Max: 5},
		Y: chart.Axis{Label: "latency (ms, log)", Log: true},
	}
	for _, n := range ns {
		s := chart.Series{Name: n.name}
		last := 0.0
		for _, p := range n.pts {
			x := 5.0
			if p.Quantile < 1 {
				x = min(nines(p.Quantile), 4.9)
				last = x
			} else {
				x = min(last+0.5, 5)
			}
			s.X, s.Y = append(s.X, x), append(s.Y, max(p.Ms, 0.001))
		}
		if len(s.X) > 0 {
			c.Series = append(c.Series, s)
		}
	}
	return c
}

func timelineChart(title, unit string, runs []scenario.Run) chart.Line {
	c := chart.Line{Title: title, X: chart.Axis{Label: "seconds into the measured window"}, Y: chart.Axis{Label: unit}}
	for _, r := range runs {
		s := chart.Series{Name: r.System}
		for _, p := range r.Timeline {
			s.X, s.Y = append(s.X, p.Sec), append(s.Y, p.PerSec)
		}
		if len(s.X) > 0 {
			c.Series = append(c.Series, s)
		}
	}
	return c
}

// binSeries plots a distribution as shares of the total at each bin's
// geometric centre.
func binSeries(name string, bins []stats.Bin) chart.Series {
	s := chart.Series{Name: name}
	var total int64
	for _, b := range bins {
		total += b.Count
	}
	if total == 0 {
		return s
	}
	for _, b := range bins {
		s.X = append(s.X, math.Sqrt(b.LoMs*b.HiMs))
		s.Y = append(s.Y, float64(b.Count)/float64(total))
	}
	return s
}
