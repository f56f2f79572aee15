package queue

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// waiterMeta is the JSON part of a waiter value.
type waiterMeta struct {
	ClientID string `json:"c,omitempty"`
	TTL      int64  `json:"t"`
	Epoch    uint16 `json:"e"`
	// Session is true when the lock belongs to a session lease. Only a key
	// whose own value says it is not a session's has a lease of its own,
	// which its cleanup and release may revoke.
	Session bool `json:"ss,omitempty"`
	// Sealed is the secret masked with a digest of the request id, so a
	// retried acquire that presents the same request id can hand out the
	// same lock id, while a reader of etcd alone cannot.
	Sealed string `json:"s"`
	// Owner binds the waiter to the caller that enqueued it (see
	// ownerBinding): a retry key lets that caller resume, nobody else.
	Owner string `json:"o,omitempty"`
	// Enqueued is when the waiter enqueued, in Unix milliseconds.
	Enqueued int64 `json:"q"`
	// Attempt is a nonce each attempt writes anew (enqueue and takeover),
	// so the exact value an attempt wrote identifies it even when the
	// answer to its write was lost.
	Attempt string `json:"a,omitempty"`
	// Value is an election leader's value (ElectionName): what it
	// campaigned with, or last proclaimed. Locks leave it empty.
	Value []byte `json:"v,omitempty"`
	// Limit is the semaphore limit the waiter was enqueued with; 0 (a
	// lock's, which records none: storedLimit) means 1. A takeover keeps it.
	Limit int `json:"n,omitempty"`
	// Reenter is the secret masked with a digest of the session's secret,
	// written only by a re-entrant session acquire (reenter.go): a later
	// re-entrant acquire through the same session hands out the same lock
	// id with it, whatever its request id.
	Reenter string `json:"r,omitempty"`
	// Delay is the lock-delay the waiter asked for, in milliseconds
	// (delay.go): a hub that sees a key with one go looks for delay
	// records before its next grant.
	Delay int64 `json:"d,omitempty"`
}

// newAttempt draws an attempt nonce.
func newAttempt() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newHoldID draws the id of a new hold of a re-entered lock (reenter.go),
// shaped as a waiter id: 16 random bytes in hex.
func newHoldID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func encodeValue(s Secret, m waiterMeta) string {
	b, _ := json.Marshal(m) // a struct of strings and ints always marshals
	return valueHeader(s) + string(b)
}

// ValueEpoch reads the shard-map epoch a waiter key's value records: for
// readers of etcd's history that are not an engine.
func ValueEpoch(v []byte) (uint16, error) {
	m, err := decodeValue(v)
	return m.Epoch, err
}

func decodeValue(v []byte) (m waiterMeta, err error) {
	s := string(v)
	i := strings.IndexByte(s, '\n')
	if i < 0 || !strings.HasPrefix(s, "lg1 ") {
		return m, fmt.Errorf("queue: waiter value has an unknown format")
	}
	if err := json.Unmarshal(v[i+1:], &m); err != nil {
		return m, fmt.Errorf("queue: waiter value: %w", err)
	}
	return m, nil
}

// ownerBinding is what a waiter records of the caller that enqueued it: a
// digest of the caller's authenticated identity within its tenant, its
// client id and its session lease. A retry with the same request id
// resumes the waiter only when all three match, so a request id — often
// guessable, and documented as a retry key — never hands a waiter, its
// place or its secret to anyone else.
func ownerBinding(owner, clientID string, session clientv3.LeaseID) string {
	h := sha256.Sum256([]byte("leasegate/owner\x00" + owner + "\x00" + clientID + "\x00" + strconv.FormatInt(int64(session), 16)))
	return hex.EncodeToString(h[:16])
}

// maskOf is a secret's mask: the first SecretLen bytes of the SHA-256 of
// label and data.
func maskOf(label string, data []byte) (m [SecretLen]byte) {
	h := sha256.Sum256(append([]byte(label), data...))
	copy(m[:], h[:])
	return m
}

func sealMask(requestID string) [SecretLen]byte {
	return maskOf("leasegate/seal\x00", []byte(requestID))
}

func sealSecret(s Secret, requestID string) string { return sealWith(s, sealMask(requestID)) }

func sealWith(s Secret, m [SecretLen]byte) string {
	var out [SecretLen]byte
	for i := range out {
		out[i] = s[i] ^ m[i]
	}
	return hex.EncodeToString(out[:])
}

func unsealSecret(sealed, requestID string) (Secret, error) {
	return unsealWith(sealed, sealMask(requestID))
}

func unsealWith(sealed string, m [SecretLen]byte) (Secret, error) {
	var s Secret
	b, err := hex.DecodeString(sealed)
	if err != nil || len(b) != SecretLen {
		return s, fmt.Errorf("queue: sealed secret is malformed")
	}
	for i := range s {
		s[i] = b[i] ^ m[i]
	}
	return s, nil
}

// sessionMeta is the JSON part of a session record's value.
type sessionMeta struct {
	ClientID string `json:"c,omitempty"`
	// TTL is the session lease's granted TTL in seconds, reported as the
	// TTL of the locks attached.
	TTL int64 `json:"t,omitempty"`
}

func decodeSession(v []byte) sessionMeta {
	var m sessionMeta
	if i := strings.IndexByte(string(v), '\n'); i >= 0 {
		_ = json.Unmarshal(v[i+1:], &m)
	}
	return m
}
