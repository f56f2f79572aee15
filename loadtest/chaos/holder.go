//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasegate/leasegate/client"
)

// The holder role: a lock holder in a process of its own, so that the
// nemesis can SIGSTOP it past its TTL. It is a holder that does not know
// when it is dead: once granted it writes its token to the register every
// 50 ms and never looks at its lock, as a process paused between its
// check and its write would. The test binary runs it when its environment
// sets roleEnv=holder (see RunRole; leasectl.go has the other roles).
const (
	roleEnv     = "LEASEGATE_CHAOS_ROLE"
	gatewaysEnv = "LEASEGATE_CHAOS_GATEWAYS"
	nameEnv     = "LEASEGATE_CHAOS_NAME"
	ttlEnv      = "LEASEGATE_CHAOS_TTL"
	registerEnv = "LEASEGATE_CHAOS_REGISTER"
	idEnv       = "LEASEGATE_CHAOS_ID"
)

// holderEvent is one line a holder prints on stdout.
type holderEvent struct {
	Ev        string    `json:"ev"` // granted, write, lost, error
	Token     int64     `json:"token,omitempty"`
	Shard     string    `json:"shard,omitempty"`
	RequestID string    `json:"requestId,omitempty"`
	Invoke    time.Time `json:"invoke,omitzero"`
	At        time.Time `json:"at"`
	OK        bool      `json:"ok,omitempty"`
	Highest   int64     `json:"highest,omitempty"`
	Err       string    `json:"err,omitempty"`
}

// RunRole runs a child role and exits when the environment asks for one;
// otherwise it returns at once. Call it first in TestMain.
func RunRole() {
	role := os.Getenv(roleEnv)
	run := map[string]func() error{"holder": runHolder, "cmd": runCmd, "cmd-child": runCmdChild, "mono": runMono}[role]
	if run == nil {
		return
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runHolder() error {
	out := json.NewEncoder(os.Stdout)
	emit := func(ev holderEvent) {
		ev.At = time.Now()
		_ = out.Encode(ev)
	}
	ttl, err := time.ParseDuration(os.Getenv(ttlEnv))
	if err != nil {
		return err
	}
	id, name := os.Getenv(idEnv), os.Getenv(nameEnv)
	c, err := client.New(strings.Split(os.Getenv(gatewaysEnv), ","), client.WithClientID(id),
		client.WithRequestTimeout(2*time.Second), client.WithRetryBackoff(50*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		return err
	}
	rid := newRequestID()
	invoke := time.Now()
	l, err := c.Acquire(context.Background(), name, client.WithTTL(ttl), client.WithWaitTimeout(10*time.Second), client.WithRequestID(rid))
	if err != nil {
		emit(holderEvent{Ev: "error", Err: err.Error(), RequestID: rid, Invoke: invoke})
		return nil
	}
	emit(holderEvent{Ev: "granted", Token: l.Token(), Shard: l.Shard(), RequestID: rid, Invoke: invoke})
	go func() {
		<-l.Done()
		emit(holderEvent{Ev: "lost", Err: fmt.Sprint(l.Err())})
	}()
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		q := url.Values{"name": {name}, "token": {fmt.Sprint(l.Token())}, "client": {id}}
		resp, err := hc.Post(os.Getenv(registerEnv)+"/write?"+q.Encode(), "text/plain", nil)
		if err == nil {
			var wr writeResult
			derr := json.NewDecoder(resp.Body).Decode(&wr)
			resp.Body.Close()
			if derr == nil {
				emit(holderEvent{Ev: "write", Token: l.Token(), OK: wr.OK, Highest: wr.Highest})
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holderProc is a running holder as the nemesis sees it.
type holderProc struct {
	p      *proc
	events chan holderEvent
}

// startHolder starts a holder process for name. The test binary is the
// holder's executable.
func (h *Harness) startHolder(name string) (*holderProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.holderNo++
	id := fmt.Sprintf("holder-%d", h.holderNo)
	h.mu.Unlock()
	pr, pw := io.Pipe()
	env := childEnv(roleEnv+"=holder", gatewaysEnv+"="+strings.Join(h.frontURLs(), ","), nameEnv+"="+name,
		ttlEnv+"="+h.cfg.TTL.String(), registerEnv+"="+h.Reg.URL(), idEnv+"="+id)
	p, err := startProc(id, exe, []string{"-test.run=^$"}, env, filepath.Join(h.out, "logs", "holders.log"), pw)
	if err != nil {
		return nil, err
	}
	h.addCloser(p.kill)
	hp := &holderProc{p: p, events: make(chan holderEvent, 1024)}
	go func() {
		<-p.exited
		pw.Close()
	}()
	go func() {
		defer close(hp.events)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var ev holderEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				select {
				case hp.events <- ev:
				default: // nobody is reading any more
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return hp, nil
}

// next returns the next event of kind ev (any kind when ev is ""), or false
// after timeout.
func (hp *holderProc) next(ev string, timeout time.Duration) (holderEvent, bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case e, ok := <-hp.events:
			if !ok {
				return holderEvent{}, false
			}
			if ev == "" || e.Ev == ev || e.Ev == "error" {
				return e, true
			}
		case <-t.C:
			return holderEvent{}, false
		}
	}
}
