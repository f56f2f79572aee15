package queue

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
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

// valueHeader is the fixed prefix of every waiter and session value: a
// version tag and the hex SHA-256 of the owner's secret, then a newline.
// Renew and release prove ownership inside their transaction by comparing
// the value to lie strictly between header and header+"\xff": exactly the
// values that begin with the header, since the JSON that follows is UTF-8
// and UTF-8 never contains the byte 0xff.
func valueHeader(s Secret) string {
	h := sha256.Sum256(s[:])
	return "lg1 " + hex.EncodeToString(h[:]) + "\n"
}

// handleCmps are the compares proving that key is h's key — its create
// revision, its lease — then extra, then ownerCmps for h's secret.
func handleCmps(key string, h Handle, extra ...clientv3.Cmp) []clientv3.Cmp {
	cmps := append([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", h.Revision),
		clientv3.Compare(clientv3.LeaseValue(key), "=", h.Lease),
	}, extra...)
	return append(cmps, ownerCmps(key, h.Secret)...)
}

// ownerCmps are the compares proving that key carries the owner's secret:
// every transaction that acts for an owner includes them.
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

// The layout of a key space: every record of the space is under its
// prefix, in one of these ranges (or is its release mark, handoff.go).
const (
	locksSeg    = "/locks/"    // waiter and holder keys, by name
	sessionsSeg = "/sessions/" // session records
	holdsSeg    = "/holds/"    // the holds of re-entered locks (reenter.go)
	delaysSeg   = "/delays/"   // lock-delay and holder records (delay.go, loss.go)
	auditSeg    = "/audit/"    // force-release audit records (force.go)
	handoffSeg  = "/handoff/"  // handoff records (handoff.go)
)

// layoutRoots are the beginnings of every record of a space, relative to
// its prefix.
var layoutRoots = [...]string{locksSeg, releaseMarkKey, sessionsSeg, holdsSeg, delaysSeg, auditSeg, handoffSeg}

// validSpace checks prefix as the prefix of a key space of an engine
// whose own space is root: it is a Config.Prefix, and neither prefix is
// nested in the other under a record of the other's layout, so that no key
// of one space is a key of the other.
func validSpace(root, prefix string) error {
	if !strings.HasPrefix(prefix, "/") || strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("%w: key space %q must start with '/' and not end with one", ErrInvalidArgument, prefix)
	}
	for _, p := range [2][2]string{{root, prefix}, {prefix, root}} {
		rest, ok := strings.CutPrefix(p[1], p[0])
		if !ok || !strings.HasPrefix(rest, "/") {
			continue
		}
		for _, r := range layoutRoots {
			if strings.HasPrefix(rest+"/", r) {
				return fmt.Errorf("%w: key space %q overlaps the %q records of key space %q", ErrInvalidArgument, p[1], r, p[0])
			}
		}
	}
	return nil
}

// LocksPrefix is the range holding every waiter key of every name under an
// engine's prefix; NamePrefix follows it.
func LocksPrefix(prefix string) string { return prefix + locksSeg }

// NamePrefix is the range holding every waiter key of name under an
// engine's prefix (Config.Prefix); it ends in '/', which escaped names
// never contain. A waiter's key is NamePrefix followed by its WaiterID.
func NamePrefix(prefix, name string) string {
	return LocksPrefix(prefix) + escapeName(name) + "/"
}

// SplitWaiterKey parses key as a waiter key of the engine at prefix,
// NamePrefix(prefix, name) followed by a waiter id, and returns the name
// (an engine name: ElectionName of an election's) and the waiter id. ok is
// false for every other key: of another engine, a record that is not a
// waiter's, a segment that is no escaped name. The parse is anchored at
// prefix: a key is judged by the layout from the engine's root down, never
// by where "/locks/" happens to occur in it (a tenant or cluster prefix
// may contain it).
func SplitWaiterKey(prefix, key string) (name, waiterID string, ok bool) {
	rest, ok := strings.CutPrefix(key, LocksPrefix(prefix))
	if !ok {
		return "", "", false
	}
	seg, waiterID, ok := strings.Cut(rest, "/")
	if !ok || seg == "" || waiterID == "" || strings.Contains(waiterID, "/") {
		return "", "", false
	}
	name, err := unescapeName(seg)
	if err != nil || escapeName(name) != seg {
		return "", "", false
	}
	return name, waiterID, true
}

// keys builds the key layout of one space.
type keys struct{ prefix string }

// locks is the range of the space's waiter keys (LocksPrefix).
func (k keys) locks() string { return LocksPrefix(k.prefix) }

// sessions is the range of the space's session records.
func (k keys) sessions() string { return k.prefix + sessionsSeg }

// delays is the range of the space's lock-delay and holder records.
func (k keys) delays() string { return k.prefix + delaysSeg }

// mark is the space's release mark (handoff.go).
func (k keys) mark() string { return k.prefix + releaseMarkKey }

// rel is a waiter key relative to the space's locks range, as release
// marks and audit records name it.
func (k keys) rel(key string) string { return strings.TrimPrefix(key, k.locks()) }

func (k keys) namePrefix(name string) string { return NamePrefix(k.prefix, name) }

func (k keys) waiter(name, waiterID string) string {
	return k.namePrefix(name) + waiterID
}

// session is the key of the record that proves a session lease:
// valueHeader of the session's secret, then JSON.
func (k keys) session(lease clientv3.LeaseID) string {
	return fmt.Sprintf("%s%s%016x", k.prefix, sessionsSeg, int64(lease))
}

// holds is the record of the holds of the re-entered lock whose key is
// name's waiterID created at rev (reenter.go): outside the name's prefix,
// so no hub or count sees it as a waiter.
func (k keys) holds(name, waiterID string, rev int64) string {
	return k.holdsOf(name, waiterID) + strconv.FormatInt(rev, 10)
}

// holdsOf is the range of the holds records of every key of name's
// waiterID.
func (k keys) holdsOf(name, waiterID string) string {
	return k.prefix + holdsSeg + escapeName(name) + "/" + waiterID + "/"
}

// escapeName maps a valid name to a key segment that never contains '/', so
// the name's key prefix (segment + "/") can never be a prefix of another
// name's keys: "a", "a/b" and "a-b" stay different locks.
func escapeName(name string) string {
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if isPlain(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func isPlain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == ':' || c == '@' || c == '+' || c == '=' || c == ','
}

// unescapeName reverses escapeName.
func unescapeName(seg string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(seg) {
			return "", fmt.Errorf("%w: truncated escape in %q", ErrInvalidName, seg)
		}
		var v byte
		if _, err := fmt.Sscanf(seg[i+1:i+3], "%02X", &v); err != nil {
			return "", fmt.Errorf("%w: bad escape in %q", ErrInvalidName, seg)
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}
