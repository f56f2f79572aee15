package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

// The REST API of leasegate, as in the design it comes from:
//
//	POST /api/v1/locks/acquire {"name","ttlMs","clientId"[,"requestId"][,"limit"][,"lockDelayMs"][,"waitTimeoutMs"]}
//	  200 {"acquired":true,"lockId","fencingToken","expiresAt"}
//	  200 {"acquired":false,"expiresAt"}            (the holder's expiry)
//	POST /api/v1/locks/renew {"lockId","fencingToken","ttlMs"}
//	  200 {"renewed":true,"expiresAt"}
//	  409 {"renewed":false,"reason":"expired"|"stolen"|"released"|"evicted"}
//	POST /api/v1/locks/release {"lockId","fencingToken"}
//	  204
//
// An acquire without waitTimeoutMs (or with 0) tries once and never waits.
// With waitTimeoutMs > 0 it waits in the name's FIFO queue, the same queue
// as the streaming Acquire's waiters and under the same caps, until it is
// granted (200 acquired) or the wait ends (200 acquired false, as a try
// answers). The waiter's key lives while the HTTP request does: a client
// that goes away cancels the request, and the engine removes the key. A
// grant that cannot be written is given up. Errors answer
// {"error":{"code","message","field"}} with a 4xx for bad input.

type restAcquire struct {
	Name      *string `json:"name"`
	TTLMs     *int64  `json:"ttlMs"`
	ClientID  string  `json:"clientId"`
	RequestID string  `json:"requestId"`
	// Limit makes the name a semaphore (AcquireRequest.limit); 0 or absent: a lock.
	Limit int32 `json:"limit"`
	// LockDelayMs is AcquireRequest.lock_delay_ms.
	LockDelayMs int64 `json:"lockDelayMs"`
	// WaitTimeoutMs, when above 0, makes the acquire wait up to this long
	// (at most the gateway's MaxWaitTimeout); absent or 0: try once.
	WaitTimeoutMs *int64 `json:"waitTimeoutMs"`
}

type restAcquired struct {
	Acquired     bool   `json:"acquired"`
	LockID       string `json:"lockId,omitempty"`
	FencingToken int64  `json:"fencingToken,omitempty"`
	ExpiresAt    string `json:"expiresAt,omitempty"`
	// DelayUntil is set on a refusal of a free name an expired holder's
	// lock-delay holds back: when the delay ends (and ExpiresAt with it).
	DelayUntil string `json:"delayUntil,omitempty"`
}

// restLockRef names a held lock in renew and release bodies.
type restLockRef struct {
	LockID       *string `json:"lockId"`
	FencingToken *int64  `json:"fencingToken"`
}

// decodeRef decodes a renew or release body into in and reports the
// first missing field of r, its lock reference.
func decodeRef(body []byte, in any, r *restLockRef) error {
	if err := decodeStrict(body, in); err != nil {
		return err
	}
	if r.LockID == nil {
		return badField("lock_id", "is required")
	}
	if r.FencingToken == nil {
		return badField("fencing_token", "is required")
	}
	return nil
}

type restRenew struct {
	restLockRef
	TTLMs int64 `json:"ttlMs"`
}

type restRenewed struct {
	Renewed   bool   `json:"renewed"`
	ExpiresAt string `json:"expiresAt,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

type restError struct {
	Error restErrorBody `json:"error"`
}

type restErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// restFields maps proto field names to the REST API's names.
var restFields = map[string]string{
	"ttl_ms": "ttlMs", "client_id": "clientId", "request_id": "requestId",
	"lock_id": "lockId", "fencing_token": "fencingToken", "name": "name", "lock_delay_ms": "lockDelayMs",
	"wait_timeout_ms": "waitTimeoutMs",
}

// errAnswered is a REST handler's report that it wrote its answer itself.
var errAnswered = errors.New("the answer was written by the handler")

// handleREST registers each REST lock call on its own path, so the mux
// routes it once, and a 404 for any other path under /api/v1/.
func (s *Service) handleREST(mux *http.ServeMux) {
	for op, h := range map[string]restHandler{
		"acquire": s.restAcquire, "renew": s.restRenew, "release": s.restRelease,
	} {
		mux.Handle(restPrefix+op, s.tel.restCall(op, s.restPost(h)))
	}
	mux.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeRESTError(w, http.StatusNotFound, "not_found", "", fmt.Sprintf("no such endpoint %s; see /api/v1/locks/acquire, renew, release", r.URL.Path))
	})
}

// restHandler answers one REST call: a status and a body to write, or an
// error; errAnswered when it wrote its answer to w itself.
type restHandler func(ctx context.Context, w http.ResponseWriter, body []byte) (int, any, error)

// restPost decodes a bounded JSON body strictly and hands it to h.
func (s *Service) restPost(h restHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// A request refused before its handler runs is a bad request.
		refuse := func(status int, code, msg string) {
			recordOf(r.Context()).setErr(connect.NewError(connect.CodeInvalidArgument, nil))
			writeRESTError(w, status, code, "", msg)
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			refuse(http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
			return
		}
		// Only JSON: browsers send text/plain and form bodies across
		// origins without a preflight, application/json never.
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			refuse(http.StatusUnsupportedMediaType, "invalid_argument", fmt.Sprintf("Content-Type %q is not accepted; send application/json", r.Header.Get("Content-Type")))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			refuse(http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request body is over the %d-byte limit", s.cfg.MaxBodyBytes))
			return
		} else if err != nil {
			refuse(http.StatusBadRequest, "invalid_argument", "could not read the request body")
			return
		}
		status, out, err := h(r.Context(), w, body)
		if errors.Is(err, errAnswered) {
			return
		}
		if err != nil {
			err = named(err)
			ce := toConnect(err)
			recordOf(r.Context()).setErr(ce)
			field, msg := errField(err), ce.Message()
			var fe *fieldError
			if errors.As(err, &fe) {
				if camel := restFields[fe.field]; camel != "" && !fe.verbatim {
					field = camel
				}
				// Speak the REST API's field names in its messages.
				if strings.HasPrefix(msg, fe.field+":") {
					msg = field + msg[len(fe.field):]
				}
			}
			if ce.Code() == connect.CodeResourceExhausted {
				w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(err)))
			}
			status, ok := httpStatuses[ce.Code()]
			if !ok {
				status = http.StatusServiceUnavailable
			}
			writeRESTError(w, status, ce.Code().String(), field, msg)
			return
		}
		if out == nil {
			w.WriteHeader(status)
			return
		}
		writeJSON(w, status, out)
	}
}

// decodeStrict parses exactly one JSON object with no unknown fields.
func decodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badField("body", "is empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field == "":
			// The body itself: an array, a string, a number.
			return badField("body", "is a JSON %s; want a JSON object", te.Value)
		case errors.As(err, &te):
			// Field is a path through embedded structs; name the JSON key.
			f := te.Field[strings.LastIndexByte(te.Field, '.')+1:]
			return badField(f, "is a JSON %s; want %s", te.Value, jsonKind(te.Type))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			fe := badField(f, "is not a known field").(*fieldError)
			if camel := restFields[f]; camel != "" && camel != f {
				// A gRPC/proto spelling: say how the REST API spells it.
				fe = badField(f, "is not a known field; the REST API spells it %q", camel).(*fieldError)
			}
			fe.verbatim = true
			return fe
		default:
			return badField("body", "is not valid JSON")
		}
	}
	if dec.More() {
		return badField("body", "has data after the JSON object")
	}
	return nil
}

// jsonKind says in JSON's words what a field of Go type t takes, so that
// no Go type name reaches a caller.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

func (s *Service) restAcquire(ctx context.Context, w http.ResponseWriter, body []byte) (int, any, error) {
	var in restAcquire
	if err := decodeStrict(body, &in); err != nil {
		return 0, nil, err
	}
	if in.Name == nil {
		return 0, nil, badField("name", "is required")
	}
	// The REST acquire's ttlMs has no default: required, and 0 is refused.
	if in.TTLMs == nil {
		return 0, nil, badField("ttl_ms", "is required; want %d to %d", queue.MinLeaseTTL.Milliseconds(), queue.MaxLeaseTTL.Milliseconds())
	}
	if _, err := s.ttl("ttl_ms", *in.TTLMs, false); err != nil {
		return 0, nil, err
	}
	var waitMs int64
	if in.WaitTimeoutMs != nil {
		// Compared in milliseconds, before any conversion can overflow.
		waitMs = *in.WaitTimeoutMs
		if waitMs < 0 || waitMs > s.cfg.MaxWaitTimeout.Milliseconds() {
			return 0, nil, badField("wait_timeout_ms", "%d is outside 0 (no wait) to %d", waitMs, s.cfg.MaxWaitTimeout.Milliseconds())
		}
	}
	id, r, _, err := s.acquireRequest(ctx, *in.Name, *in.TTLMs, in.ClientID, in.RequestID, "", in.Limit, false, in.LockDelayMs)
	if err != nil {
		return 0, nil, err
	}
	if waitMs > 0 {
		return s.restWait(ctx, w, id, r, waitMs)
	}
	a, err := s.acquireOf(id, r, nil, false)
	if err != nil {
		return 0, nil, err
	}
	shard, res, err := s.router.TryAcquire(ctx, a)
	if err != nil {
		return 0, nil, s.lim.capped(err)
	}
	if !res.Acquired {
		recordOf(ctx).setOutcome("busy")
		var expires time.Time
		if res.Holder != nil {
			expires = res.Holder.Expires
		}
		return http.StatusOK, refusal(expires, res.DelayedUntil), nil
	}
	recordOf(ctx).setShard(shard)
	g := s.granted(id, shard, res.Grant)
	return http.StatusOK, restAcquired{Acquired: true, LockID: g.LockId, FencingToken: g.FencingToken, ExpiresAt: rfc3339(res.Grant.Deadline)}, nil
}

func (s *Service) restRenew(ctx context.Context, _ http.ResponseWriter, body []byte) (int, any, error) {
	var in restRenew
	if err := decodeRef(body, &in, &in.restLockRef); err != nil {
		return 0, nil, err
	}
	rn, err := s.renew(ctx, *in.LockID, *in.FencingToken, in.TTLMs)
	if err == nil {
		return http.StatusOK, restRenewed{Renewed: true, ExpiresAt: rfc3339(rn.Deadline)}, nil
	}
	// A lost lock is an answer here, not an error: record the loss it is
	// (a released lock was let go, not lost).
	for _, end := range []struct {
		err    error
		reason string
	}{{queue.ErrReleased, "released"}, {queue.ErrEvicted, "evicted"}, {queue.ErrExpired, "expired"}, {queue.ErrStolen, "stolen"}} {
		if errors.Is(err, end.err) {
			recordOf(ctx).setErr(toConnect(err))
			if end.err != queue.ErrReleased {
				recordOf(ctx).setLoss(end.reason)
			}
			return http.StatusConflict, restRenewed{Reason: end.reason}, nil
		}
	}
	return 0, nil, err
}

func (s *Service) restRelease(ctx context.Context, _ http.ResponseWriter, body []byte) (int, any, error) {
	var in restLockRef
	if err := decodeRef(body, &in, &in); err != nil {
		return 0, nil, err
	}
	if _, err := s.release(ctx, *in.LockID, *in.FencingToken); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeRESTError(w http.ResponseWriter, status int, code, field, msg string) {
	writeJSON(w, status, restError{Error: restErrorBody{Code: code, Message: msg, Field: field}})
}

// refusal answers an acquire that was not granted: the holder's expiry
// (zero: no holder), or the end of a lock-delay on a free name.
func refusal(holderExpires, delayUntil time.Time) restAcquired {
	out := restAcquired{}
	if !holderExpires.IsZero() {
		out.ExpiresAt = rfc3339(holderExpires)
	}
	if !delayUntil.IsZero() {
		// Free, but held back by an expired holder's lock-delay until then.
		out.ExpiresAt, out.DelayUntil = rfc3339(delayUntil), rfc3339(delayUntil)
	}
	return out
}

// restWait runs a REST acquire that waits up to waitMs (> 0) through
// streamAcquire (the same queue, caps, limits and shutdown). Its positions
// and heartbeats report only whether the request is alive, so a client
// that went away leaves the queue and its waiter's lease is renewed no
// more. The grant is written and flushed within SendTimeout, or given up
// by streamAcquire; at the wait's end a Describe of the name answers a
// refusal as a try's.
func (s *Service) restWait(ctx context.Context, w http.ResponseWriter, id Identity, r queue.AcquireRequest, waitMs int64) (int, any, error) {
	rc, _ := ctx.Value(unaryRCKey{}).(*http.ResponseController)
	if rc != nil {
		// The answer comes after the wait: the edge's unary write deadline
		// would cut a legitimate wait short. (Socket deadlines are wall
		// clock times, never the gateway's clock.)
		_ = rc.SetWriteDeadline(time.Now().Add(time.Duration(waitMs)*time.Millisecond + s.router.RequestTimeout() + s.cfg.SendTimeout))
	}
	recordOf(ctx).setMode("immediate")
	alive := func(*v1.Queued) error {
		if first, shard := recordOf(ctx).queued(time.Now()); first {
			s.tel.waitBegan(ctx, shard)
		}
		return context.Cause(ctx)
	}
	written := false
	err := s.streamAcquire(ctx, id, r, nil, false, waitMs, acquireSink{
		queued: alive,
		granted: func(g *v1.Granted) error {
			if s.restGrantHook != nil {
				s.restGrantHook(ctx)
			}
			if err := context.Cause(ctx); err != nil {
				return fmt.Errorf("the client went away: %w", err)
			}
			written = true
			if rc != nil {
				_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.SendTimeout))
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			out := restAcquired{Acquired: true, LockID: g.LockId, FencingToken: g.FencingToken}
			if g.ExpiresAt != nil {
				out.ExpiresAt = rfc3339(g.ExpiresAt.AsTime())
			}
			err := json.NewEncoder(w).Encode(out)
			if err == nil && rc != nil {
				err = rc.Flush()
			}
			if err != nil {
				return fmt.Errorf("the message was not delivered: %w", err)
			}
			return nil
		},
	})
	switch {
	case written:
		if err != nil {
			recordOf(ctx).setErr(toConnect(err))
		}
		return 0, nil, errAnswered
	case errors.Is(err, queue.ErrWaitTimeout):
		recordOf(ctx).setOutcome("busy")
		_, d, derr := s.router.Describe(ctx, id.Tenant, r.Name)
		if derr != nil {
			return 0, nil, derr
		}
		var expires time.Time
		if d.Holder != nil {
			expires = d.Holder.Expires
		}
		return http.StatusOK, refusal(expires, d.DelayUntil), nil
	case err != nil:
		return 0, nil, err
	}
	// streamAcquire returns nil only after the grant was written.
	return 0, nil, errAnswered
}
