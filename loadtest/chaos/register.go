//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/leasegate/leasegate/fence"
)

// Register is the protected resource: a fenced register per lock name,
// kept by fence.Memory. Every operation is recorded with invoke and
// complete times taken around the guard's critical section, so the
// recorded interval contains the operation's linearization point whoever
// called it: an in-process worker, or a holder process over HTTP.
type Register struct {
	mem  *fence.Memory
	hist *History
	srv  *http.Server
	ln   net.Listener
}

// writeResult is the HTTP answer to a write (ok: accepted) or a read (ok
// always; highest is the read's result).
type writeResult struct {
	OK      bool  `json:"ok"`
	Highest int64 `json:"highest"`
}

func newRegister(hist *History) (*Register, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Register{mem: fence.NewMemory(), hist: hist, ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		token, err := strconv.ParseInt(q.Get("token"), 10, 64)
		if err != nil || q.Get("name") == "" {
			http.Error(w, "want name and token", http.StatusBadRequest)
			return
		}
		ok, highest, err := r.Write(req.Context(), q.Get("client"), q.Get("name"), token)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(writeResult{OK: ok, Highest: highest})
	})
	mux.HandleFunc("GET /read", func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		if q.Get("name") == "" {
			http.Error(w, "want name", http.StatusBadRequest)
			return
		}
		highest, err := r.Read(req.Context(), q.Get("client"), q.Get("name"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(writeResult{OK: true, Highest: highest})
	})
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// URL is the register's HTTP base URL.
func (r *Register) URL() string { return "http://" + r.ln.Addr().String() }

// Close stops the HTTP server.
func (r *Register) Close() { _ = r.srv.Close() }

// Write stores token as name's value if it is at least the highest
// accepted; ok is false, with the highest token, when it is stale.
func (r *Register) Write(ctx context.Context, client, name string, token int64) (ok bool, highest int64, err error) {
	invoke := time.Now()
	err = r.mem.Write(ctx, name, token, nil)
	complete := time.Now()
	var stale *fence.StaleTokenError
	switch {
	case err == nil:
		ok, highest = true, token
	case errors.As(err, &stale):
		highest, err = stale.Highest, nil
	default:
		return false, 0, err // never applied: the guard's context ended first
	}
	r.hist.addRegister(RegisterOp{Client: client, Name: name, Write: true, Token: token, OK: ok, Highest: highest, Invoke: invoke, Complete: complete})
	return ok, highest, nil
}

// Read returns the highest token accepted for name (0 when none).
func (r *Register) Read(ctx context.Context, client, name string) (int64, error) {
	invoke := time.Now()
	highest, _, err := r.mem.Highest(ctx, name)
	complete := time.Now()
	if err != nil {
		return 0, err
	}
	r.hist.addRegister(RegisterOp{Client: client, Name: name, Highest: highest, Invoke: invoke, Complete: complete})
	return highest, nil
}
