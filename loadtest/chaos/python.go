//go:build linux

package chaos

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// The Python actor: worker processes that run pyworker.py with the Python
// SDK (sdk/python) over every gateway's front link, taking the contended
// names of the Go workers under the same faults. A worker reports each
// acquire as JSON lines on stdout, stamped with CLOCK_MONOTONIC readings
// (pyworker.py lists the events); the harness places the readings on its
// own timeline (mono.go) and records the acquires as any worker's, so the
// checkers judge them with the rest. Its register writes go to the
// register's HTTP endpoint, which records them, as it does every holder
// process's: their recorded interval contains the write's linearization
// point wherever the caller runs.

//go:embed pyworker.py
var pyWorkerSource []byte

// pyEvent is one line a Python worker prints.
type pyEvent struct {
	Ev string `json:"ev"`
	Op int    `json:"op"`
	// At is the event's CLOCK_MONOTONIC reading in nanoseconds.
	At        int64   `json:"at"`
	Name      string  `json:"name"`
	RequestID string  `json:"requestId"`
	Wait      float64 `json:"wait"` // seconds
	TTL       float64 `json:"ttl"`  // seconds
	Token     int64   `json:"token"`
	Shard     string  `json:"shard"`
	LockID    string  `json:"lockId"`
	Outcome   string  `json:"outcome"`
	Err       string  `json:"err"`
	Code      string  `json:"code"`
	Reason    string  `json:"reason"`
	Lost      bool    `json:"lost"`
	Proof     bool    `json:"proof"`
	Evicted   bool    `json:"evicted"`
	Deadline  int64   `json:"deadline"` // CLOCK_MONOTONIC nanoseconds
}

// pyOp is what the harness keeps of one acquire of a Python worker.
type pyOp struct {
	op     *AcquireOp
	lockID string
}

// pyStopGrace is how long a Python worker has, once asked to stop, to
// give up its wait, release what it holds and exit.
const pyStopGrace = 20 * time.Second

// runPythonWorkers adds cfg.PythonWorkers Python workers to wg; they run
// until ctx ends. Without a Python interpreter (Binaries.Python empty) the
// actor is skipped, and the run says so.
func (h *Harness) runPythonWorkers(ctx context.Context, wg *sync.WaitGroup, seed uint64) error {
	if h.cfg.PythonWorkers == 0 {
		return nil
	}
	if h.python == "" || h.pythonSDK == "" {
		h.logf("python3 not found: the Python actor is skipped (PythonWorkers %d)", h.cfg.PythonWorkers)
		return nil
	}
	script := filepath.Join(h.out, "pyworker.py")
	if err := os.WriteFile(script, pyWorkerSource, 0o644); err != nil {
		return err
	}
	for i := range h.cfg.PythonWorkers {
		if err := h.startPython(ctx, wg, script, fmt.Sprintf("py%d", i), seed+uint64(i)); err != nil {
			return err
		}
	}
	return nil
}

// startPython starts the Python worker who and adds to wg its stop, at the
// end of ctx, and the reading of its report.
func (h *Harness) startPython(ctx context.Context, wg *sync.WaitGroup, script, who string, seed uint64) error {
	conf, err := json.Marshal(map[string]any{"id": who, "endpoints": h.frontURLs(), "names": h.names,
		"register": h.Reg.URL(), "ttl": h.cfg.TTL.Seconds(), "seed": seed})
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	env := childEnv("PYTHONPATH="+h.pythonSDK, "PYTHONDONTWRITEBYTECODE=1")
	p, err := startProc(who, h.python, []string{"-u", script, string(conf)}, env, filepath.Join(h.out, "logs", "python.log"), pw)
	if err != nil {
		return err
	}
	h.addCloser(p.kill)
	read := make(chan struct{})
	go func() {
		<-p.exited
		pw.Close()
	}()
	go func() {
		defer close(read)
		h.readPython(who, pr)
	}()
	wg.Go(func() {
		select {
		case <-ctx.Done():
			_ = p.end(syscall.SIGTERM)
		case <-p.exited:
		}
		select {
		case <-p.exited:
		case <-time.After(pyStopGrace):
			h.harnessErr(fmt.Errorf("%s: still running %s after SIGTERM; killed (logs/python.log)", who, pyStopGrace))
			p.kill()
		}
		<-read
		switch {
		case p.unasked():
			h.harnessErr(fmt.Errorf("%s exited before the workload stopped (%v); its stderr is in logs/python.log", who, p.err))
		case p.err != nil:
			h.harnessErr(fmt.Errorf("%s: %v (logs/python.log)", who, p.err))
		}
	})
	return nil
}

// readPython records the acquires a Python worker reports on r until it
// ends. A line that is not an event of an acquire the worker invoked, or a
// reading later than the line's arrival, is the harness's failure: the
// history could not be trusted.
func (h *Harness) readPython(who string, r io.Reader) {
	defer func() { _, _ = io.Copy(io.Discard, r) }()
	ops := map[int]*pyOp{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		received := time.Now()
		var ev pyEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			h.harnessErr(fmt.Errorf("%s printed %q: %w", who, sc.Text(), err))
			return
		}
		at := h.mono.at(ev.At)
		if at.After(received.Add(h.mono.err)) {
			h.harnessErr(fmt.Errorf("%s: %s of op %d at CLOCK_MONOTONIC %d maps to %s, after the line arrived at %s: the clocks disagree",
				who, ev.Ev, ev.Op, ev.At, ts(at), ts(received)))
			return
		}
		if ev.Ev == "invoke" {
			ttl := time.Duration(ev.TTL * float64(time.Second))
			h.noteTTL(ttl)
			ops[ev.Op] = &pyOp{op: h.Hist.begin(&AcquireOp{Client: who, Role: "python", Name: ev.Name, RequestID: ev.RequestID,
				Wait: time.Duration(ev.Wait * float64(time.Second)), TTL: ttl, Invoke: at})}
			continue
		}
		po := ops[ev.Op]
		if po == nil {
			h.harnessErr(fmt.Errorf("%s printed %s of op %d, which it never invoked", who, ev.Ev, ev.Op))
			return
		}
		if err := h.pyEvent(po, ev, at); err != nil {
			h.harnessErr(fmt.Errorf("%s, op %d: %w", who, ev.Op, err))
			return
		}
	}
	if err := sc.Err(); err != nil {
		h.harnessErr(fmt.Errorf("%s: reading its report: %w", who, err))
	}
}

// pyEvent records ev, which happened at at, on its acquire, as
// acquireWith, followBelief, lost and release do for a Go worker's.
func (h *Harness) pyEvent(po *pyOp, ev pyEvent, at time.Time) error {
	op := po.op
	switch ev.Ev {
	case "queued":
		h.Hist.update(func() {
			if op.Queued.IsZero() {
				op.Queued = at
			}
			op.LastQueued = at
		})
	case "granted":
		po.lockID = ev.LockID
		h.Hist.update(func() {
			op.Complete, op.Outcome, op.Token, op.Shard = at, outGranted, ev.Token, ev.Shard
			if ev.RequestID != op.RequestID {
				op.GrantedUnder = ev.RequestID
			}
		})
	case "fail":
		h.Hist.update(func() {
			op.Complete, op.Outcome, op.Err, op.Code, op.Reason = at, ev.Outcome, ev.Err, ev.Code, ev.Reason
		})
	case "done":
		h.Hist.update(func() { op.DoneAt = at })
	case "end":
		h.Hist.update(func() {
			op.End = at
			if ev.Lost {
				op.Lost, op.LostProof, op.ToldEvicted, op.LostErr = true, ev.Proof, ev.Evicted, ev.Err
				op.Deadline = h.mono.at(ev.Deadline)
			}
		})
	case "released":
		var sl staleLock
		h.Hist.update(func() {
			sl = staleLock{id: po.lockID, token: op.Token, name: op.Name, shard: op.Shard, client: op.Client}
		})
		h.stale.addLock(sl)
	default:
		return fmt.Errorf("unknown event %q", ev.Ev)
	}
	return nil
}
