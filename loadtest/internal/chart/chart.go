// Package chart renders simple line charts as standalone SVG: axes with
// ticks and grid, linear or log scales, one polyline per series and a
// legend. It needs no fonts or libraries; any browser or Markdown viewer
// shows the result.
package chart

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
)

// Series is one line: points (X[i], Y[i]).
type Series struct {
	Name string
	X, Y []float64
}

// Tick is one labelled axis position.
type Tick struct {
	V     float64
	Label string
}

// Axis describes one axis. Min and Max default to the data's range (from 0
// for a linear Y axis); Ticks default to round values.
type Axis struct {
	Label    string
	Log      bool
	Min, Max float64
	Ticks    []Tick
}

// Line is a line chart. Width and Height default to 720×400.
type Line struct {
	Title  string
	X, Y   Axis
	Series []Series
	Width  int
	Height int
}

// Palette colours the series in order; it is readable on white and for
// the common forms of colour blindness.
var Palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#999999"}

const (
	padLeft, padRight, padTop, padBottom = 70, 20, 40, 50
	legendRow                            = 16
)

// SVG renders the chart. Points that a log axis cannot show (≤ 0) are left
// out.
func (c Line) SVG() []byte {
	w, h := c.Width, c.Height
	if w == 0 {
		w = 720
	}
	if h == 0 {
		h = 400
	}
	legendH := legendRow * ((len(c.Series) + 2) / 3)
	plotW := float64(w - padLeft - padRight)
	plotH := float64(h - padTop - padBottom - legendH)
	xs, ys := c.scale(c.X, true), c.scale(c.Y, false)
	px := func(v float64) float64 { return padLeft + xs.frac(v)*plotW }
	py := func(v float64) float64 { return padTop + (1-ys.frac(v))*plotH }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", padLeft, esc(c.Title))
	// Grid and ticks.
	for _, t := range xs.ticks {
		x := px(t.V)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", x, padTop, x, padTop+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, padTop+plotH+15, esc(t.Label))
	}
	for _, t := range ys.ticks {
		y := py(t.V)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", padLeft, y, padLeft+plotW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padLeft-6, y+4, esc(t.Label))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#333333"/>`+"\n", padLeft, padTop, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", padLeft+plotW/2, padTop+plotH+32, esc(c.X.Label))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", padTop+plotH/2, esc(c.Y.Label))
	// Series.
	for i, s := range c.Series {
		col := Palette[i%len(Palette)]
		var pts bytes.Buffer
		for j := range min(len(s.X), len(s.Y)) {
			if !xs.shows(s.X[j]) || !ys.shows(s.Y[j]) {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(s.X[j]), py(s.Y[j]))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", col, bytes.TrimSpace(pts.Bytes()))
		lx := padLeft + float64(i%3)*plotW/3
		ly := float64(h-legendH) + float64(i/3)*legendRow + 4
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", lx, ly, lx+18, ly, col)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+24, ly+4, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// scale maps an axis's values onto [0, 1].
type scale struct {
	log      bool
	lo, hi   float64 // in axis units (log10 when log)
	ticks    []Tick
	min, max float64
}

func (s scale) shows(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!s.log || v > 0)
}

func (s scale) frac(v float64) float64 {
	if s.log {
		v = math.Log10(v)
	}
	if s.hi == s.lo {
		return 0.5
	}
	return min(max((v-s.lo)/(s.hi-s.lo), -0.02), 1.02)
}

func (c Line) scale(a Axis, isX bool) scale {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		vs := s.Y
		if isX {
			vs = s.X
		}
		for _, v := range vs {
			if math.IsNaN(v) || math.IsInf(v, 0) || (a.Log && v <= 0) {
				continue
			}
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	if !a.Log && !isX {
		lo = min(lo, 0)
	}
	if a.Min != 0 || a.Max != 0 {
		lo, hi = a.Min, a.Max
	}
	s := scale{log: a.Log, min: lo, max: hi}
	if a.Log {
		s.lo, s.hi = math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if s.hi == s.lo {
			s.hi++
		}
		s.ticks = logTicks(s.lo, s.hi)
	} else {
		step := niceStep((hi - lo) / 6)
		s.lo, s.hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
		if s.hi == s.lo {
			s.hi = s.lo + step
		}
		for v := s.lo; v <= s.hi+step/2; v += step {
			s.ticks = append(s.ticks, Tick{V: v, Label: Num(v)})
		}
	}
	if a.Ticks != nil {
		s.ticks = a.Ticks
	}
	return s
}

func logTicks(lo, hi float64) []Tick {
	var ts []Tick
	for e := lo; e <= hi; e++ {
		v := math.Pow(10, e)
		ts = append(ts, Tick{V: v, Label: Num(v)})
		if hi-lo <= 3 && e < hi {
			ts = append(ts, Tick{V: 2 * v, Label: Num(2 * v)}, Tick{V: 5 * v, Label: Num(5 * v)})
		}
	}
	return ts
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// Num formats a tick value briefly: 0.001, 0.5, 12, 1.5k, 2M.
func Num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	case a >= 1:
		// Three significant digits, never in exponent form.
		p := math.Pow(10, 2-math.Floor(math.Log10(a)))
		return strconv.FormatFloat(math.Round(v*p)/p, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func esc(s string) string { return html.EscapeString(s) }
