package scenario

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"

	"github.com/leasegate/leasegate/loadtest/internal/layers"
)

// Profiler records a CPU profile of every measured window (after its
// warmup) and keeps them by phase label ("uncontested gateway-session ×64"),
// merged over the rounds, with the operations each window completed. The
// process is the whole bed — load generator, gateway and etcd — so the
// profile of a window is everything one system's load cost.
type Profiler struct {
	// Dir receives one merged profile per phase; empty keeps none.
	Dir string

	mu     sync.Mutex
	active string
	begin  time.Time
	buf    bytes.Buffer
	order  []string
	phases map[string]*profPhase
	errs   []string
}

type profPhase struct {
	profiles []*profile.Profile
	ops      int64
	seconds  float64
}

// NewProfiler returns a profiler writing into dir (created if missing).
func NewProfiler(dir string) (*Profiler, error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	return &Profiler{Dir: dir, phases: map[string]*profPhase{}}, nil
}

// start begins profiling label's window. A nil Profiler does nothing.
func (p *Profiler) start(label string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active != "" {
		return
	}
	p.buf.Reset()
	if err := pprof.StartCPUProfile(&p.buf); err != nil {
		p.errs = append(p.errs, fmt.Sprintf("%s: %v", label, err))
		return
	}
	p.active, p.begin = label, time.Now()
}

// stop ends the window started last, which completed ops operations.
func (p *Profiler) stop(ops int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active == "" {
		return
	}
	pprof.StopCPUProfile()
	label := p.active
	p.active = ""
	prof, err := profile.Parse(&p.buf)
	if err != nil {
		p.errs = append(p.errs, fmt.Sprintf("%s: %v", label, err))
		return
	}
	ph := p.phases[label]
	if ph == nil {
		ph = &profPhase{}
		p.phases[label] = ph
		p.order = append(p.order, label)
	}
	ph.profiles = append(ph.profiles, prof)
	ph.ops += ops
	ph.seconds += time.Since(p.begin).Seconds()
}

// Rows merges each phase's rounds, writes the merged profiles into Dir and
// returns CPU per operation by layer, in the order the phases ran.
func (p *Profiler) Rows() ([]layers.Row, []string) {
	if p == nil {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var rows []layers.Row
	notes := p.errs
	for _, label := range p.order {
		ph := p.phases[label]
		merged, err := profile.Merge(ph.profiles)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: merge: %v", label, err))
			continue
		}
		r := layers.RowOf(label, merged, ph.ops, ph.seconds)
		if p.Dir != "" {
			r.File = filepath.Join(p.Dir, fileName(label)+".pprof")
			f, err := os.Create(r.File)
			if err == nil {
				err = merged.Write(f)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s: write: %v", label, err))
				r.File = ""
			}
		}
		rows = append(rows, r)
	}
	return rows, notes
}

// fileName turns a phase label into a file name.
func fileName(label string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, strings.ReplaceAll(label, "×", "x"))
}
