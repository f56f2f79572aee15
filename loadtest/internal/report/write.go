package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Files written by Write.
const (
	JSONFile     = "results.json"
	MarkdownFile = "report.md"
	LayersFile   = "layers.md"
)

// Write computes the ratios and writes results.json, report.md and the
// charts into dir, creating it. It returns the paths written.
func Write(dir string, r *Results) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r.Ratios = Ratios(r)
	r.Figures = Figures(r)
	if r.Pinned != nil {
		r.PinnedRatios = PinnedRatios(r.Pinned)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode results: %w", err)
	}
	charts := Charts(r)
	files := map[string][]byte{JSONFile: append(js, '\n'), MarkdownFile: Markdown(r, charts)}
	for _, c := range charts {
		files[c.File] = c.SVG
	}
	if len(r.Layers) > 0 {
		files[LayersFile] = LayersMarkdown(r)
	}
	var paths []string
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
