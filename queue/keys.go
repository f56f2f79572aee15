package queue

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SecretLen is the size of an owner's secret in bytes (128 bits).
const SecretLen = 16

// Secret proves ownership of a waiter key. Only its SHA-256 is compared by
// etcd; the secret itself travels in the lock id.
type Secret [SecretLen]byte

// NewSecret draws a secret from crypto/rand.
func NewSecret() (Secret, error) {
	var s Secret
	if _, err := rand.Read(s[:]); err != nil {
		return s, fmt.Errorf("queue: draw secret: %w", err)
	}
	return s, nil
}

// valueHeader is the fixed prefix of every waiter value: a version tag and
// the hex SHA-256 of the owner's secret, then a newline. Renew and release
// prove ownership inside their transaction by comparing the value to lie
// strictly between header and header+"\xff": exactly the values that begin
// with the header, since the JSON that follows is UTF-8 and UTF-8 never
// contains the byte 0xff.
func valueHeader(s Secret) string {
	h := sha256.Sum256(s[:])
	return "lg1 " + hex.EncodeToString(h[:]) + "\n"
}

// ownerCmps are the compares proving that key carries the owner's secret.
func ownerCmps(key string, s Secret) []clientv3.Cmp {
	h := valueHeader(s)
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(key), ">", h),
		clientv3.Compare(clientv3.Value(key), "<", h+"\xff"),
	}
}

// waiterMeta is the JSON part of a waiter value.
type waiterMeta struct {
	ClientID string `json:"c,omitempty"`
	TTL      int64  `json:"t"`
	Epoch    uint16 `json:"e"`
	Session  bool   `json:"ss,omitempty"`
	// Sealed is the secret masked with a digest of the request id, so a
	// retried acquire that presents the same request id can hand out the
	// same lock id, while a reader of etcd alone cannot.
	Sealed string `json:"s"`
	// Acquired is when the waiter enqueued, in Unix milliseconds.
	Enqueued int64 `json:"q"`
}

func encodeValue(s Secret, m waiterMeta) string {
	b, _ := json.Marshal(m) // a struct of strings and ints always marshals
	return valueHeader(s) + string(b)
}

func decodeValue(v []byte) (header string, m waiterMeta, err error) {
	s := string(v)
	i := strings.IndexByte(s, '\n')
	if i < 0 || !strings.HasPrefix(s, "lg1 ") {
		return "", m, fmt.Errorf("queue: waiter value has an unknown format")
	}
	if err := json.Unmarshal(v[i+1:], &m); err != nil {
		return "", m, fmt.Errorf("queue: waiter value: %w", err)
	}
	return s[:i+1], m, nil
}

func sealMask(requestID string) [SecretLen]byte {
	h := sha256.Sum256([]byte("leasegate/seal\x00" + requestID))
	var m [SecretLen]byte
	copy(m[:], h[:])
	return m
}

func sealSecret(s Secret, requestID string) string {
	m := sealMask(requestID)
	var out [SecretLen]byte
	for i := range out {
		out[i] = s[i] ^ m[i]
	}
	return hex.EncodeToString(out[:])
}

func unsealSecret(sealed, requestID string) (Secret, error) {
	var s Secret
	b, err := hex.DecodeString(sealed)
	if err != nil || len(b) != SecretLen {
		return s, fmt.Errorf("queue: sealed secret is malformed")
	}
	m := sealMask(requestID)
	for i := range s {
		s[i] = b[i] ^ m[i]
	}
	return s, nil
}

// WaiterID derives the waiter's key segment from its request id: a retried
// acquire with the same request id lands on the same key.
func WaiterID(requestID string) string {
	h := sha256.Sum256([]byte("leasegate/waiter\x00" + requestID))
	return hex.EncodeToString(h[:16])
}

// keys builds the key layout of one engine.
type keys struct{ prefix string }

// namePrefix is the range holding every waiter of name; it ends in '/',
// which escaped names never contain.
func (k keys) namePrefix(name string) string {
	return k.prefix + "/locks/" + escapeName(name) + "/"
}

func (k keys) waiter(name, waiterID string) string {
	return k.namePrefix(name) + waiterID
}

func (k keys) session(lease clientv3.LeaseID) string {
	return fmt.Sprintf("%s/sessions/%016x", k.prefix, int64(lease))
}
