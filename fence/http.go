package fence

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// Request headers read by Middleware.
const (
	// HeaderToken carries the fencing token as a decimal int64 >= 0.
	HeaderToken = "Fencing-Token"
	// HeaderLockName carries the lock name the token was granted for. It
	// is the key the token is fenced under.
	HeaderLockName = "Lock-Name"
)

// Error codes in the "error" field of Middleware's JSON error bodies.
const (
	// CodeMissingToken (400): no Fencing-Token header.
	CodeMissingToken = "missing_token"
	// CodeInvalidToken (400): Fencing-Token is not one decimal int64 >= 0.
	CodeInvalidToken = "invalid_token"
	// CodeMissingLockName (400): no Lock-Name header, or an empty one.
	CodeMissingLockName = "missing_lock_name"
	// CodeStaleToken (409): the token is lower than the highest accepted.
	CodeStaleToken = "stale_token"
	// CodeUnavailable (503): the Store failed; the request may be retried.
	CodeUnavailable = "fence_unavailable"
)

// StaleBody is the JSON body of a 409 response. Tokens are decimal strings,
// the same text as the Fencing-Token header, e.g.
//
//	{"error":"stale_token","token":"10","highest":"11","lockName":"order:42"}
//
// Strings, not JSON numbers: a token is epoch<<48 | revision, which passes
// 2^53 from epoch 32 on, and JSON parsers that read numbers as IEEE doubles
// (JavaScript's among them) round such a token — a refused token can then
// even read as equal to the highest. Go code can decode the body into a
// StaleBody (the ",string" tags convert); other clients read the strings and
// parse them as 64-bit integers, or compare them as text after comparing
// lengths.
type StaleBody struct {
	// Error is always CodeStaleToken.
	Error string `json:"error"`
	// Token is the request's refused token.
	Token int64 `json:"token,string"`
	// Highest is the highest token accepted for LockName.
	Highest int64 `json:"highest,string"`
	// LockName is the request's Lock-Name.
	LockName string `json:"lockName"`
}

// ErrorBody is the JSON body of Middleware's 400 and 503 responses.
type ErrorBody struct {
	// Error is one of the Code… constants.
	Error string `json:"error"`
	// Message says what was wrong and what is allowed.
	Message string `json:"message"`
}

type ctxKey int

const (
	tokenKey ctxKey = iota
	lockNameKey
)

// Middleware fences every request it wraps: it reads the Lock-Name and
// Fencing-Token headers, records the token in store as the highest for the
// lock name, and only then calls next, with the token and lock name in the
// request's context (see TokenFromContext and LockNameFromContext).
//
// Responses it writes itself, all with a JSON body:
//   - 400 ErrorBody when a header is missing, repeated or malformed (the
//     token must be plain decimal digits, 0 to 9223372036854775807);
//   - 409 StaleBody when the token is lower than the highest accepted
//     (its tokens are decimal strings);
//   - 503 ErrorBody when store fails (the cause is not exposed).
//
// Accepting means recording before the handler runs. The check therefore
// covers the request, not the handler's own side effects: a stale request
// is stopped at the door, but a request that passed and then stalls (a GC
// pause inside the handler) is not stopped again. Where the handler writes
// to a store of its own, fence that write too (SQLGuard.Write, EtcdGuard.Put,
// Memory.Write) with the token from TokenFromContext; the middleware then
// just turns stale clients away early. Fencing the write under the same key
// in the same store is fine: the equal token passes. The token stays recorded if next fails:
// that is safe, because only the same or a newer holder can pass afterwards
// and an equal token passes again on retry.
//
// Wrap only the routes that need fencing (writes); reads usually do not.
func Middleware(store Store, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		names := r.Header.Values(HeaderLockName)
		if len(names) != 1 || names[0] == "" {
			writeJSON(w, http.StatusBadRequest, ErrorBody{
				Error:   CodeMissingLockName,
				Message: "fence: header " + HeaderLockName + " is required, exactly once and not empty",
			})
			return
		}
		name := names[0]
		tokens := r.Header.Values(HeaderToken)
		if len(tokens) == 0 {
			writeJSON(w, http.StatusBadRequest, ErrorBody{
				Error:   CodeMissingToken,
				Message: "fence: header " + HeaderToken + " is required",
			})
			return
		}
		token, ok := parseToken(tokens)
		if !ok {
			writeJSON(w, http.StatusBadRequest, ErrorBody{
				Error:   CodeInvalidToken,
				Message: "fence: header " + HeaderToken + " must appear once and hold only decimal digits, a value from 0 to 9223372036854775807",
			})
			return
		}
		err := store.Accept(r.Context(), name, token)
		var se *StaleTokenError
		switch {
		case errors.As(err, &se):
			writeJSON(w, http.StatusConflict, StaleBody{
				Error:    CodeStaleToken,
				Token:    se.Token,
				Highest:  se.Highest,
				LockName: name,
			})
			return
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, ErrorBody{
				Error:   CodeUnavailable,
				Message: "fence: the token store is unavailable; retry later",
			})
			return
		}
		ctx := context.WithValue(r.Context(), tokenKey, token)
		ctx = context.WithValue(ctx, lockNameKey, name)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// parseToken accepts exactly one header value of 1 to 19 ASCII digits that
// fits an int64; no sign, space or other notation.
func parseToken(values []string) (int64, bool) {
	if len(values) != 1 || len(values[0]) == 0 || len(values[0]) > 19 {
		return 0, false
	}
	for _, c := range []byte(values[0]) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	token, err := strconv.ParseInt(values[0], 10, 64)
	return token, err == nil
}

// TokenFromContext returns the fencing token Middleware accepted for the
// request whose context ctx is, and false outside Middleware.
func TokenFromContext(ctx context.Context) (int64, bool) {
	token, ok := ctx.Value(tokenKey).(int64)
	return token, ok
}

// LockNameFromContext returns the lock name Middleware fenced the request
// under, and false outside Middleware.
func LockNameFromContext(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(lockNameKey).(string)
	return name, ok
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// The status line is already out; a failed body write has nowhere to go.
	_ = json.NewEncoder(w).Encode(body)
}
