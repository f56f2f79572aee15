package gateway

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
)

// Id integrity.
//
// A lock or session id is everything a gateway needs to act on a lock, and
// it travels through clients, logs and proxies. Its fields — shard, lease,
// revision, epoch, tenant — are claims: the engine never acts on one without
// comparing it with etcd inside the transaction that acts. The ids carry a
// second defence: an HMAC-SHA256 tag under a key the fleet shares, so an id
// no gateway issued, or one edited since, is refused before etcd is touched.
//
// Keys are numbered (1–255) and the number travels in the id, so keys rotate
// without a flag day: add the new key everywhere (verify-only), make it the
// signing key, and retire the old one once no id signed with it can still be
// in use (the longest a lock or session may be held). A gateway refuses an
// id whose key it does not have.

// IDKey is one key ids are signed with.
type IDKey struct {
	// ID numbers the key, 1 to 255; it is written into every id it signs.
	ID uint8
	// Secret is the HMAC key: at least MinIDKeyLen random bytes.
	Secret []byte

	// macs holds HMACs keyed with Secret, set by NewIDKeys: a new one
	// per id costs allocations and two hashed key blocks. nil in a key
	// made by hand, which then keys a new HMAC each time.
	macs *sync.Pool
}

// mac returns an HMAC-SHA256 keyed with k's secret, reset; give it back
// with putMAC once its sum is taken.
func (k IDKey) mac() hash.Hash {
	if k.macs == nil {
		return hmac.New(sha256.New, k.Secret)
	}
	m := k.macs.Get().(hash.Hash)
	m.Reset()
	return m
}

func (k IDKey) putMAC(m hash.Hash) {
	if k.macs != nil {
		k.macs.Put(m)
	}
}

// MinIDKeyLen is the shortest accepted key secret, in bytes.
const MinIDKeyLen = 32

// IDKeyring provides the keys ids are signed and verified with. It is safe
// for concurrent use.
type IDKeyring interface {
	// Signing is the key new ids are signed with.
	Signing() IDKey
	// Lookup returns the key numbered id, to verify an id signed with it.
	Lookup(id uint8) (IDKey, bool)
}

// IDKeys is a fixed keyring: the first key signs, every key verifies.
type IDKeys struct {
	keys []IDKey
}

// NewIDKeys returns a keyring of keys; the first signs. It refuses an
// empty list, a key numbered 0, a number used twice and a short secret.
func NewIDKeys(keys ...IDKey) (*IDKeys, error) {
	if len(keys) == 0 {
		return nil, errors.New("gateway: no id keys; want at least one")
	}
	seen := map[uint8]bool{}
	for _, k := range keys {
		switch {
		case k.ID == 0:
			return nil, errors.New("gateway: id key number 0; want 1 to 255")
		case seen[k.ID]:
			return nil, fmt.Errorf("gateway: id key %d appears twice", k.ID)
		case len(k.Secret) < MinIDKeyLen:
			return nil, fmt.Errorf("gateway: id key %d is %d bytes; want at least %d random bytes", k.ID, len(k.Secret), MinIDKeyLen)
		}
		seen[k.ID] = true
	}
	out := &IDKeys{keys: make([]IDKey, len(keys))}
	for i, k := range keys {
		secret := bytes.Clone(k.Secret)
		out.keys[i] = IDKey{ID: k.ID, Secret: secret, macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}}
	}
	return out, nil
}

// GenerateIDKey draws a new key numbered id from crypto/rand.
func GenerateIDKey(id uint8) (IDKey, error) {
	k := IDKey{ID: id, Secret: make([]byte, MinIDKeyLen)}
	if _, err := rand.Read(k.Secret); err != nil {
		return IDKey{}, fmt.Errorf("gateway: draw id key: %w", err)
	}
	return k, nil
}

// Signing is the first key.
func (k *IDKeys) Signing() IDKey { return k.keys[0] }

// Lookup finds the key numbered id.
func (k *IDKeys) Lookup(id uint8) (IDKey, bool) {
	for _, key := range k.keys {
		if key.ID == id {
			return key, true
		}
	}
	return IDKey{}, false
}

// Keys lists the keys, signing key first.
func (k *IDKeys) Keys() []IDKey { return append([]IDKey(nil), k.keys...) }

// ParseIDKeys reads a keyring in its text form: one key per line, its
// number and its secret in standard base64 separated by a space; the first
// key signs. Blank lines and lines starting with '#' are ignored. Errors
// name the line, never the secret.
func ParseIDKeys(text []byte) (*IDKeys, error) {
	var keys []IDKey
	sc := bufio.NewScanner(bytes.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		num, secret, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("gateway: id keys line %d: want \"NUMBER BASE64-SECRET\"", n)
		}
		id, err := strconv.ParseUint(num, 10, 8)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("gateway: id keys line %d: key number %q; want 1 to 255", n, num)
		}
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(secret))
		if err != nil {
			return nil, fmt.Errorf("gateway: id keys line %d: the secret is not standard base64", n)
		}
		keys = append(keys, IDKey{ID: uint8(id), Secret: b})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("gateway: id keys: %w", err)
	}
	return NewIDKeys(keys...)
}

// Format writes the keyring in the text form ParseIDKeys reads.
func (k *IDKeys) Format() []byte {
	var b bytes.Buffer
	b.WriteString("# leasegate id keys: NUMBER BASE64-SECRET; the first line signs, every line verifies\n")
	for _, key := range k.keys {
		fmt.Fprintf(&b, "%d %s\n", key.ID, base64.StdEncoding.EncodeToString(key.Secret))
	}
	return b.Bytes()
}

// Rotated returns a keyring signing with a new key, keeping the current
// ones for verification (at most keep keys in all, the oldest dropped).
func (k *IDKeys) Rotated(keep int) (*IDKeys, error) {
	used := map[uint8]bool{}
	for _, key := range k.keys {
		used[key.ID] = true
	}
	next := k.keys[0].ID
	for {
		next++
		if next == 0 {
			next = 1
		}
		if !used[next] {
			break
		}
		if next == k.keys[0].ID {
			return nil, errors.New("gateway: every id key number is in use; retire some first")
		}
	}
	nk, err := GenerateIDKey(next)
	if err != nil {
		return nil, err
	}
	keys := append([]IDKey{nk}, k.keys...)
	if keep > 0 && len(keys) > keep {
		keys = keys[:keep]
	}
	return NewIDKeys(keys...)
}

// Without returns the keyring without key id, which must not be the signing key.
func (k *IDKeys) Without(id uint8) (*IDKeys, error) {
	if k.keys[0].ID == id {
		return nil, fmt.Errorf("gateway: id key %d signs new ids; rotate before retiring it", id)
	}
	var keys []IDKey
	for _, key := range k.keys {
		if key.ID != id {
			keys = append(keys, key)
		}
	}
	if len(keys) == len(k.keys) {
		return nil, fmt.Errorf("gateway: no id key %d", id)
	}
	return NewIDKeys(keys...)
}
