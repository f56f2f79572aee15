package system

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// RESTPerLock drives the gateway's REST JSON API (POST /api/v1/locks/acquire and
// /release) with plain net/http over HTTP/1.1 keep-alive connections, one
// per client at most: what a caller without the SDK does. Every lock has a
// lease of its own (the REST API has no sessions). Its acquire never waits,
// so a held name is ErrBusy.
type RESTPerLock struct {
	base string
	hc   *http.Client
	ttl  time.Duration
}

// NewRESTPerLock returns the REST per-lock system for the gateway at base, with up to
// conns idle connections kept for reuse.
func NewRESTPerLock(base string, ttl time.Duration, conns int) *RESTPerLock {
	return &RESTPerLock{base: strings.TrimSuffix(base, "/"), ttl: ttl, hc: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConns:        conns + 8,
			MaxIdleConnsPerHost: conns + 8,
			IdleConnTimeout:     90 * time.Second,
		},
	}}
}

// Name implements System.
func (r *RESTPerLock) Name() string { return "gateway-rest" }

// Describe implements System.
func (r *RESTPerLock) Describe() string {
	return fmt.Sprintf("leasegate's RESTPerLock JSON API over HTTP/1.1 keep-alive (net/http, no SDK); a lease of its own per lock, TTL %s", r.ttl)
}

// NewClient implements System.
func (r *RESTPerLock) NewClient(context.Context) (Client, error) { return restPerLockClient{r}, nil }

// Close implements System.
func (r *RESTPerLock) Close() error { r.hc.CloseIdleConnections(); return nil }

type restPerLockClient struct{ r *RESTPerLock }

// post sends body to path and decodes a JSON answer into out (when not
// nil), expecting status want.
func (r *RESTPerLock) post(ctx context.Context, path string, body any, want int, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("rest %s: %s: %s", path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (c restPerLockClient) Acquire(ctx context.Context, name string, onEnqueued func()) (Held, error) {
	var out struct {
		Acquired     bool   `json:"acquired"`
		LockID       string `json:"lockId"`
		FencingToken int64  `json:"fencingToken"`
	}
	in := map[string]any{"name": name, "ttlMs": c.r.ttl.Milliseconds(), "clientId": "loadtest"}
	if err := c.r.post(ctx, "/api/v1/locks/acquire", in, http.StatusOK, &out); err != nil {
		return nil, err
	}
	once(onEnqueued)()
	if !out.Acquired {
		return nil, ErrBusy
	}
	return &restPerLockHeld{r: c.r, id: out.LockID, token: out.FencingToken}, nil
}

func (c restPerLockClient) Close(context.Context) error { return nil }

type restPerLockHeld struct {
	r     *RESTPerLock
	id    string
	token int64
}

func (h *restPerLockHeld) Release(ctx context.Context) error {
	return h.r.post(ctx, "/api/v1/locks/release", map[string]any{"lockId": h.id, "fencingToken": h.token}, http.StatusNoContent, nil)
}

func (h *restPerLockHeld) Order() int64 { return h.token & revisionMask }
