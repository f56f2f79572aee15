package queue

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

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
