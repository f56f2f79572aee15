package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/queue"
)

// ErrMalformedID reports a lock or session id that does not decode.
var ErrMalformedID = errors.New("malformed id")

const (
	lockIDVersion    = 2
	sessionIDVersion = 2
	flagSession      = 1
	flagHold         = 2 // the id names one hold of a re-entered lock
	maxIDLen         = 2048
	tagLen           = 16
)

// Domains keep a lock id's tag from ever verifying as a session id's.
var (
	lockIDDomain    = []byte("leasegate lock id\x00")
	sessionIDDomain = []byte("leasegate session id\x00")
)

// seal appends the version, key number and tag around body.
func seal(keys IDKeyring, domain []byte, version byte, body []byte) string {
	k := keys.Signing()
	b := make([]byte, 0, 2+len(body)+sha256.Size)
	b = append(b, version, k.ID)
	b = append(b, body...)
	b = appendTag(b, k, domain, b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// appendTag appends the tag of b under k and domain to dst.
func appendTag(dst []byte, k IDKey, domain, b []byte) []byte {
	m := k.mac()
	m.Write(domain)
	m.Write(b)
	n := len(dst)
	dst = m.Sum(dst)[:n+tagLen]
	k.putMAC(m)
	return dst
}

// open checks an id's version and tag and returns a reader of its body;
// its errors name the id as what and never echo it.
func open(keys IDKeyring, domain []byte, version byte, what, s string) (*reader, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: %s is empty", ErrMalformedID, what)
	}
	if len(s) > maxIDLen {
		return nil, fmt.Errorf("%w: %s is %d bytes; the limit is %d", ErrMalformedID, what, len(s), maxIDLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not base64url", ErrMalformedID, what)
	}
	if len(b) < 2+tagLen {
		return nil, fmt.Errorf("%w: %s is truncated", ErrMalformedID, what)
	}
	if b[0] != version {
		return nil, fmt.Errorf("%w: unknown %s version %d", ErrMalformedID, what, b[0])
	}
	k, ok := keys.Lookup(b[1])
	if !ok {
		return nil, fmt.Errorf("%w: %s is signed with id key %d, which this gateway does not have (retired, or not yet rolled out)", ErrMalformedID, what, b[1])
	}
	n := len(b) - tagLen
	var sum [sha256.Size]byte
	if !hmac.Equal(appendTag(sum[:0], k, domain, b[:n]), b[n:]) {
		return nil, fmt.Errorf("%w: %s failed its integrity check: this fleet did not issue it, or it was altered", ErrMalformedID, what)
	}
	return &reader{b: b[2:n]}, nil
}

// LockID is what a lock id carries: enough for any gateway process to renew
// or release the lock without shared memory.
type LockID struct {
	// Tenant the lock belongs to ("" without multi-tenancy).
	Tenant string
	// Shard is the etcd cluster the lock lives on.
	Shard string
	// Handle names the holder's key and proves ownership.
	Handle queue.Handle
}

// EncodeLockID returns the opaque, URL-safe, signed form of id. It
// contains the holder's secret: treat it like a password.
func EncodeLockID(keys IDKeyring, id LockID) string {
	wid, _ := hex.DecodeString(id.Handle.WaiterID)
	b := make([]byte, 0, 96+len(id.Tenant)+len(id.Shard)+len(id.Handle.Name))
	var flags byte
	if id.Handle.Session {
		flags |= flagSession
	}
	hold, _ := hex.DecodeString(id.Handle.HoldID)
	if len(hold) > 0 {
		flags |= flagHold
	}
	b = append(b, flags)
	b = appendString(b, id.Tenant)
	b = appendString(b, id.Shard)
	b = binary.BigEndian.AppendUint64(b, uint64(id.Handle.Lease))
	b = binary.BigEndian.AppendUint64(b, uint64(id.Handle.Revision))
	b = binary.BigEndian.AppendUint16(b, id.Handle.Epoch)
	b = appendString(b, string(wid))
	b = append(b, id.Handle.Secret[:]...)
	b = appendString(b, id.Handle.Name)
	if len(hold) > 0 {
		b = appendString(b, string(hold))
	}
	return seal(keys, lockIDDomain, lockIDVersion, b)
}

// DecodeLockID verifies and parses a lock id. Its errors wrap
// ErrMalformedID and never echo the id.
func DecodeLockID(keys IDKeyring, s string) (LockID, error) {
	var id LockID
	r, err := open(keys, lockIDDomain, lockIDVersion, "lock id", s)
	if err != nil {
		return id, err
	}
	flags := r.byte()
	id.Tenant = r.string()
	id.Shard = r.string()
	id.Handle.Lease = clientv3.LeaseID(r.uint64())
	id.Handle.Revision = int64(r.uint64())
	id.Handle.Epoch = r.uint16()
	wid := r.string()
	copy(id.Handle.Secret[:], r.bytes(queue.SecretLen))
	id.Handle.Name = r.string()
	id.Handle.Session = flags&flagSession != 0
	var hold string
	if flags&flagHold != 0 {
		hold = r.string()
	}
	if r.err || len(r.b) != 0 {
		return LockID{}, fmt.Errorf("%w: lock id is truncated or has trailing bytes", ErrMalformedID)
	}
	if len(wid) != 16 || id.Handle.Revision <= 0 || id.Handle.Lease == 0 || id.Shard == "" || flags&^(flagSession|flagHold) != 0 ||
		flags&flagHold != 0 && (len(hold) != 16 || !id.Handle.Session) {
		return LockID{}, fmt.Errorf("%w: lock id fields are out of range", ErrMalformedID)
	}
	if err := queue.ValidateKeyName(id.Handle.Name); err != nil {
		return LockID{}, fmt.Errorf("%w: lock id names an invalid lock", ErrMalformedID)
	}
	id.Handle.WaiterID = hex.EncodeToString([]byte(wid))
	if hold != "" {
		id.Handle.HoldID = hex.EncodeToString([]byte(hold))
	}
	return id, nil
}

// ShardLease is one shard's lease of a session.
type ShardLease struct {
	// Shard names the etcd cluster.
	Shard string
	// Lease is the session's lease there.
	Lease clientv3.LeaseID
}

// SessionID is what a session id carries.
type SessionID struct {
	// Tenant the session belongs to.
	Tenant string
	// Leases holds one lease per shard.
	Leases []ShardLease
	// Secret proves ownership on every shard.
	Secret queue.Secret
}

// EncodeSessionID returns the opaque, URL-safe, signed form of id; it
// contains the session secret.
func EncodeSessionID(keys IDKeyring, id SessionID) string {
	var b []byte
	b = appendString(b, id.Tenant)
	b = append(b, id.Secret[:]...)
	b = binary.AppendUvarint(b, uint64(len(id.Leases)))
	for _, l := range id.Leases {
		b = appendString(b, l.Shard)
		b = binary.BigEndian.AppendUint64(b, uint64(l.Lease))
	}
	return seal(keys, sessionIDDomain, sessionIDVersion, b)
}

// Lease returns the session's lease on shard.
func (id SessionID) Lease(shard string) (clientv3.LeaseID, bool) {
	for _, l := range id.Leases {
		if l.Shard == shard {
			return l.Lease, true
		}
	}
	return 0, false
}

// DecodeSessionID verifies and parses a session id; errors wrap ErrMalformedID.
func DecodeSessionID(keys IDKeyring, s string) (SessionID, error) {
	var id SessionID
	r, err := open(keys, sessionIDDomain, sessionIDVersion, "session id", s)
	if err != nil {
		return id, err
	}
	id.Tenant = r.string()
	copy(id.Secret[:], r.bytes(queue.SecretLen))
	n := r.uvarint()
	if n == 0 || n > maxSessionShards {
		return SessionID{}, fmt.Errorf("%w: session id has %d shards", ErrMalformedID, n)
	}
	seen := map[string]bool{}
	for i := uint64(0); i < n && !r.err; i++ {
		l := ShardLease{Shard: r.string(), Lease: clientv3.LeaseID(r.uint64())}
		if seen[l.Shard] || l.Shard == "" || l.Lease == 0 {
			return SessionID{}, fmt.Errorf("%w: session id lists a shard twice or an empty lease", ErrMalformedID)
		}
		seen[l.Shard] = true
		id.Leases = append(id.Leases, l)
	}
	if r.err || len(r.b) != 0 {
		return SessionID{}, fmt.Errorf("%w: session id is truncated or has trailing bytes", ErrMalformedID)
	}
	return id, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes ids; any short read sets err and yields zero values.
type reader struct {
	b   []byte
	err bool
}

func (r *reader) bytes(n int) []byte {
	if r.err || n < 0 || len(r.b) < n {
		r.err = true
		return make([]byte, max(n, 0))
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) byte() byte     { return r.bytes(1)[0] }
func (r *reader) uint16() uint16 { return binary.BigEndian.Uint16(r.bytes(2)) }
func (r *reader) uint64() uint64 { return binary.BigEndian.Uint64(r.bytes(8)) }
func (r *reader) string() string {
	n := r.uvarint()
	if n > maxIDLen {
		r.err = true
		return ""
	}
	return string(r.bytes(int(n)))
}

func (r *reader) uvarint() uint64 {
	if r.err {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}
