package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/conformance"
)

// defaultTimeout bounds an await step that names no timeoutMs.
const defaultTimeout = 10 * time.Second

// run is one scenario's state: its clients, sessions and lock handles by
// the names the steps give them.
type run struct {
	desc     conformance.Description
	prefix   string // run/scenario prefix of every name and request id
	ctx      context.Context
	clients  map[string]*client.Client
	sessions map[string]*client.Session
	locks    map[string]*handle
	http     *http.Client
	sources  map[string]*tokenBox // by client, for those with tokenSource
	renewals map[string]*renewLog // by client, for those with recordRenewals
}

// tokenBox is the token a client's token source returns now; rotateToken
// changes it.
type tokenBox struct{ tok atomic.Pointer[string] }

func (b *tokenBox) source(context.Context) (string, error) { return *b.tok.Load(), nil }

// renewLog records a client's renewals as its WithOnRenew function sees
// them, with the deadline of the client's latest lock right after each.
type renewLog struct {
	mu   sync.Mutex
	lock *client.Lock
	seen []renewal
}

// renewal is one processed renewal: when it was sent, how it ended, and
// the lock's deadline once it was processed.
type renewal struct {
	sent, expires time.Time
	err           error
}

func (g *renewLog) observe(sent time.Time, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var exp time.Time
	if g.lock != nil {
		exp = g.lock.Expires()
	}
	g.seen = append(g.seen, renewal{sent: sent, expires: exp, err: err})
}

func (g *renewLog) since(n int) []renewal {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]renewal(nil), g.seen[n:]...)
}

// handle is a lock a step asked for: an acquire in flight or done, or a
// try-acquire's result.
type handle struct {
	name   string
	client string        // the client that asked, "" for a session
	ttl    time.Duration // the step's TTL, 0 for the default
	start  time.Time

	mu        sync.Mutex
	positions []int64
	consumed  int           // positions an awaitPosition has matched
	changed   chan struct{} // closed and replaced at every position
	done      chan struct{} // closed when the call returned
	lock      *client.Lock
	err       error
	grantedAt time.Time
	lostAt    time.Time // when the lock's Done closed
}

// newHandle is the handle of the lock step s asks for.
func (r *run) newHandle(s step) *handle {
	return &handle{
		name: r.name(s.Name), client: s.Client, ttl: ms(s.TTLMs),
		start: time.Now(), changed: make(chan struct{}), done: make(chan struct{}),
	}
}

func (h *handle) queued(p int64) {
	h.mu.Lock()
	h.positions = append(h.positions, p)
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// finish records the call's result and, for a grant, watches for the
// loss signal until the scenario ends; log, when not nil, is the
// client's renewal log, whose deadlines are then read from this lock.
func (h *handle) finish(ctx context.Context, l *client.Lock, err error, log *renewLog) {
	if log != nil && l != nil {
		log.mu.Lock()
		log.lock = l
		log.mu.Unlock()
	}
	h.mu.Lock()
	h.lock, h.err, h.grantedAt = l, err, time.Now()
	h.mu.Unlock()
	close(h.done)
	if l == nil {
		return
	}
	go func() {
		select {
		case <-l.Done():
			h.mu.Lock()
			h.lostAt = time.Now()
			h.mu.Unlock()
		case <-ctx.Done():
		}
	}()
}

func (h *handle) lostTime() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostAt
}

// signalledAt is when the loss signal fired, for a lock whose Done is
// closed: the watcher records it a moment after.
func (h *handle) signalledAt() time.Time {
	for i := 0; i < 100 && h.lostTime().IsZero(); i++ {
		time.Sleep(time.Millisecond)
	}
	return h.lostTime()
}

// errorKind names err in the step language's closed set of error kinds.
func errorKind(err error) string {
	kinds := []struct {
		err  error
		kind string
	}{
		{errCallback, "callback"},
		{context.Canceled, "cancelled"},
		{client.ErrWaitTimeout, "waitTimeout"},
		{client.ErrNotAcquired, "notAcquired"},
		{client.ErrLockLost, "lockLost"},
		{client.ErrReleased, "released"},
		{client.ErrSessionLost, "sessionLost"},
		{client.ErrRateLimited, "rateLimited"},
		{client.ErrQuotaExceeded, "quotaExceeded"},
		{client.ErrPermissionDenied, "permissionDenied"},
		{client.ErrNotOwner, "notOwner"},
		{client.ErrUnauthenticated, "unauthenticated"},
		{client.ErrInternal, "internal"},
		{client.ErrInvalidArgument, "invalidArgument"},
		{client.ErrLimitMismatch, "limitMismatch"},
		{client.ErrClosed, "closed"},
		{client.ErrUnavailable, "unavailable"},
	}
	if err == nil {
		return ""
	}
	if errors.As(err, new(thrown)) {
		return "thrown"
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return "unknown"
}

// errCallback is the error a withLock body returns for exit "error".
var errCallback = errors.New("conformance: the body's own error")

// thrown is a withLock body's panic, recovered by the runner.
type thrown struct{ v any }

func (t thrown) Error() string { return fmt.Sprintf("panic: %v", t.v) }

// expectErr checks err against a step's expectError ("" wants success).
func expectErr(want string, err error) error {
	got := errorKind(err)
	switch {
	case want == "" && err != nil:
		return fmt.Errorf("failed with %s: %v", got, err)
	case want != "" && got != want:
		return fmt.Errorf("got %q (%v); want error %q", got, err, want)
	}
	return nil
}

func (r *run) name(n string) string { return r.prefix + n }

func (r *run) clientOf(s step) (*client.Client, *client.Session, error) {
	if s.Session != "" {
		sess, ok := r.sessions[s.Session]
		if !ok {
			return nil, nil, fmt.Errorf("no session %q", s.Session)
		}
		return nil, sess, nil
	}
	c, ok := r.clients[s.Client]
	if !ok {
		return nil, nil, fmt.Errorf("no client %q", s.Client)
	}
	return c, nil, nil
}

func (r *run) handleOf(name string) (*handle, error) {
	h, ok := r.locks[name]
	if !ok {
		return nil, fmt.Errorf("no lock %q", name)
	}
	return h, nil
}

// held returns a handle's granted lock, or an error if it has none.
func (r *run) held(name string) (*handle, *client.Lock, error) {
	h, err := r.handleOf(name)
	if err != nil {
		return nil, nil, err
	}
	select {
	case <-h.done:
	default:
		return nil, nil, fmt.Errorf("lock %q is not granted yet", name)
	}
	if h.lock == nil {
		return nil, nil, fmt.Errorf("lock %q was not granted: %v", name, h.err)
	}
	return h, h.lock, nil
}

func acquireOpts(s step, prefix string, h *handle) []client.AcquireOption {
	var opts []client.AcquireOption
	if s.TTLMs > 0 {
		opts = append(opts, client.WithTTL(ms(s.TTLMs)))
	}
	if s.WaitTimeout > 0 {
		opts = append(opts, client.WithWaitTimeout(ms(s.WaitTimeout)))
	}
	if s.RequestID != "" {
		opts = append(opts, client.WithRequestID(prefix+s.RequestID))
	}
	if s.ManualRenew {
		opts = append(opts, client.WithManualRenew())
	}
	if h != nil {
		opts = append(opts, client.WithOnQueued(h.queued))
	}
	return opts
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func timeoutOf(s step) time.Duration {
	if s.TimeoutMs > 0 {
		return ms(s.TimeoutMs)
	}
	return defaultTimeout
}

func elapsedWithin(s step, d time.Duration) error {
	if s.MinElapsedMs > 0 && d < ms(s.MinElapsedMs) {
		return fmt.Errorf("took %s; want at least %dms", d, s.MinElapsedMs)
	}
	if s.MaxElapsedMs > 0 && d > ms(s.MaxElapsedMs) {
		return fmt.Errorf("took %s; want at most %dms", d, s.MaxElapsedMs)
	}
	return nil
}

// control calls the harness's control API; out, when set, receives the
// JSON answer.
func (r *run) control(method, path string, in, out any) error {
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(r.ctx, method, r.desc.Control+path, &body)
	if err != nil {
		return err
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("control %s %s: %s: %s", method, path, resp.Status, e.Error)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// requests sums the requests for method the gateways received since
// their last reset, only those presenting token's token when token is
// set; all describes every path's count, for a failure's message.
func (r *run) requests(gateways []int, method, token string) (n int64, all string, err error) {
	for _, g := range gateways {
		var got struct {
			ByPath  map[string]int64            `json:"byPath"`
			ByToken map[string]map[string]int64 `json:"byToken"`
		}
		if err := r.control("GET", fmt.Sprintf("/gateways/%d/requests", g), nil, &got); err != nil {
			return 0, "", err
		}
		paths := got.ByPath
		if token != "" {
			paths = got.ByToken[token]
		}
		for path, c := range paths {
			if strings.HasSuffix(path, "/"+method) {
				n += c
			}
		}
		all += fmt.Sprintf(" gateway %d: %v;", g, got.ByToken)
	}
	return n, all, nil
}

// confirmingMethods are the calls whose answer confirms a lock's own
// lease.
var confirmingMethods = []string{"Acquire", "TryAcquire", "Renew"}

// lastConfirmed is the arrival, at the gateways' fronts, of the latest
// request for a confirming method that they answered without error since
// their last reset.
func (r *run) lastConfirmed(gateways []int) (time.Time, error) {
	var last int64
	for _, g := range gateways {
		var got struct {
			Arrivals map[string][]conformance.Arrival `json:"arrivals"`
		}
		if err := r.control("GET", fmt.Sprintf("/gateways/%d/requests", g), nil, &got); err != nil {
			return time.Time{}, err
		}
		for path, as := range got.Arrivals {
			if !slices.ContainsFunc(confirmingMethods, func(m string) bool { return strings.HasSuffix(path, "/"+m) }) {
				continue
			}
			for _, a := range as {
				if a.OK {
					last = max(last, a.AtMs)
				}
			}
		}
	}
	if last == 0 {
		return time.Time{}, fmt.Errorf("gateways %v answered no %v without error since their reset", gateways, confirmingMethods)
	}
	return time.UnixMilli(last), nil
}

func parseToken(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }

func tokenString(l *client.Lock) string { return strconv.FormatInt(l.Token(), 10) }

func queryName(n string) string { return "/holder?name=" + url.QueryEscape(n) }
