package chart

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

func TestSVGIsWellFormed(t *testing.T) {
	c := Line{
		Title: `Latency <p99> & "friends"`,
		X:     Axis{Label: "x", Log: true},
		Y:     Axis{Label: "y"},
		Series: []Series{
			{Name: "a&b", X: []float64{0.1, 1, 10, -1, math.NaN()}, Y: []float64{1, 2, 3, 4, 5}},
			{Name: "c", X: []float64{1, 2}, Y: []float64{0, 7}},
		},
	}
	svg := string(c.SVG())
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed: %v\n%s", err, svg)
		}
	}
	for _, want := range []string{"<polyline", "a&amp;b", "Latency &lt;p99&gt;"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if strings.Contains(svg, "NaN") {
		t.Error("SVG contains NaN coordinates")
	}
}

func TestEmptyChart(t *testing.T) {
	if b := (Line{Title: "nothing"}).SVG(); !strings.Contains(string(b), "</svg>") {
		t.Errorf("empty chart = %q; want a complete SVG", b)
	}
}

func TestNum(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{0.001, "0.001"}, {0.5, "0.5"}, {12, "12"}, {1500, "1500"}, {25000, "25k"}, {2e6, "2M"}} {
		if got := Num(c.v); got != c.want {
			t.Errorf("Num(%v) = %q; want %q", c.v, got, c.want)
		}
	}
}
