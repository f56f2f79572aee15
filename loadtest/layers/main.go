// Command layers prints CPU per operation by layer (see
// loadtest/internal/layers) for CPU profiles written by
// `go run ./loadtest --cpuprofile DIR`, or for any CPU profile of a
// leasegate process:
//
//	go run ./loadtest/layers --results OUT/results.json DIR/*.pprof   # ops from the run's results
//	go run ./loadtest/layers FILE.pprof=OPS …                         # ops given (1 when left out)
//	go run ./loadtest/layers --top other FILE.pprof                   # the heaviest stacks of one layer
//
// The table has a row per profile and a column per layer, in µs of CPU per
// operation; --top lists the stacks a layer's samples came from, to check
// or refine the attribution.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/leasegate/leasegate/loadtest/internal/layers"
)

func main() {
	results := flag.String("results", "", "results.json of the run that wrote the profiles: operations per profile")
	top := flag.String("top", "", "instead of the table, list the heaviest stacks charged to this layer")
	flag.Parse()
	ops := map[string]int64{}
	if *results != "" {
		b, err := os.ReadFile(*results)
		if err != nil {
			fail(err)
		}
		var r struct {
			Layers []layers.Row `json:"layers"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			fail(err)
		}
		for _, row := range r.Layers {
			ops[filepath.Base(row.File)] = row.Ops
		}
	}
	var rows []layers.Row
	for _, arg := range flag.Args() {
		file, n := arg, int64(0)
		if f, o, ok := strings.Cut(arg, "="); ok {
			v, err := strconv.ParseInt(o, 10, 64)
			if err != nil {
				fail(fmt.Errorf("%s: %w", arg, err))
			}
			file, n = f, v
		}
		if n == 0 {
			n = max(ops[filepath.Base(file)], 1)
		}
		f, err := os.Open(file)
		if err != nil {
			fail(err)
		}
		p, err := profile.Parse(f)
		f.Close()
		if err != nil {
			fail(fmt.Errorf("%s: %w", file, err))
		}
		if *top != "" {
			showTop(file, p, *top)
			continue
		}
		rows = append(rows, layers.RowOf(strings.TrimSuffix(filepath.Base(file), ".pprof"), p, n, 0))
	}
	if *top == "" {
		layers.Table(os.Stdout, rows, "ops")
		fmt.Println()
		layers.SidesTable(os.Stdout, rows)
	}
}

func showTop(file string, p *profile.Profile, layer string) {
	sums := map[string]int64{}
	idx := len(p.SampleType) - 1
	for _, s := range p.Sample {
		var st []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				if ln.Function != nil {
					st = append(st, ln.Function.Name)
				}
			}
		}
		if layers.Classify(st) == layer {
			sums[strings.Join(st[:min(len(st), 12)], " < ")] += s.Value[idx]
		}
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return sums[keys[i]] > sums[keys[j]] })
	fmt.Printf("%s: %s\n", file, layer)
	for _, k := range keys[:min(15, len(keys))] {
		fmt.Printf("%8d  %s\n", sums[k], k)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "layers:", err)
	os.Exit(1)
}
