package shard

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultPrefix is the key prefix leasegate uses in every cluster when none
// is configured. It is the lock engine's (queue.DefaultPrefix); shard
// cannot import the engine, so TestDefaultsMatchTheEngine holds them equal.
const DefaultPrefix = "/leasegate"

// epochWidth is the width of a stored epoch: enough digits for MaxEpoch.
const epochWidth = 5

// EpochKey returns the key holding a cluster's epoch: <prefix>/meta/epoch.
// An empty prefix means DefaultPrefix; a trailing "/" is dropped.
//
// Each cluster obeys one epoch, kept under this key:
//
//   - The value is the epoch as 5-digit, zero-padded decimal ASCII ("00002"),
//     so that byte order equals numeric order and txns can compare it with
//     "=", "<" or ">" against [FormatEpoch] of another epoch.
//   - A missing key means epoch 1, and epoch 1 is never written: a cluster
//     needs no bootstrap step, and the first bump (1 → 2) creates the key.
//     [EpochCompare] therefore tests "key absent" for epoch 1 and "value
//     equal" for later epochs, a single Cmp either way.
//   - The value only moves forward ([BumpEpoch]); nothing deletes the key.
//     A cluster that lost its data reads as epoch 1 again, so once the
//     deployment is past epoch 1 it refuses every enqueue instead of
//     silently restarting its revisions (and so its tokens) under the
//     same epoch.
func EpochKey(prefix string) string { return normPrefix(prefix) + "/meta/epoch" }

// CheckPrefix reports whether prefix is a usable etcd key prefix for
// leasegate: empty (DefaultPrefix), or starting with '/' with something
// after it (a trailing '/' is dropped). "/" alone is refused: it is not
// one spelling of the default, and every component would read it
// differently.
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if !strings.HasPrefix(prefix, "/") || strings.TrimSuffix(prefix, "/") == "" || strings.ContainsAny(prefix, " \t\n") {
		return fmt.Errorf("key prefix %q: want a path such as %s (starting with '/', with a name after it, no spaces)", prefix, DefaultPrefix)
	}
	return nil
}

func normPrefix(prefix string) string {
	if prefix == "" {
		return DefaultPrefix
	}
	return strings.TrimSuffix(prefix, "/")
}

// FormatEpoch returns the stored form of epoch: 5 digits, zero-padded.
func FormatEpoch(epoch uint16) string { return fmt.Sprintf("%0*d", epochWidth, epoch) }

// ParseEpoch parses a stored epoch value. It accepts exactly the output of
// FormatEpoch for an epoch in [MinEpoch, MaxEpoch].
func ParseEpoch(v []byte) (uint16, error) {
	n, err := strconv.ParseUint(string(v), 10, 16)
	if err != nil || len(v) != epochWidth || uint16(n) < MinEpoch || uint16(n) > MaxEpoch {
		return 0, fmt.Errorf("%w: stored epoch %q is not %d digits in [%d, %d]", ErrInvalidEpoch, v, epochWidth, MinEpoch, MaxEpoch)
	}
	return uint16(n), nil
}

func checkEpoch(what string, e uint16) error {
	if e < MinEpoch || e > MaxEpoch {
		return fmt.Errorf("%w: %s epoch %d out of range [%d, %d]", ErrInvalidEpoch, what, e, MinEpoch, MaxEpoch)
	}
	return nil
}

// EpochCompare returns the txn guard that holds only while the cluster's
// epoch is epoch: put it in every enqueue txn, so that a cluster refuses
// enqueues routed by an epoch it has moved past. For epoch 1 it tests that
// the key is absent; for later epochs, that the value equals
// FormatEpoch(epoch). An epoch out of range yields a guard that never holds.
func EpochCompare(prefix string, epoch uint16) clientv3.Cmp {
	key := EpochKey(prefix)
	if epoch == MinEpoch {
		return clientv3.Compare(clientv3.Version(key), "=", 0)
	}
	if checkEpoch("", epoch) != nil {
		// No stored value is 6 characters long.
		return clientv3.Compare(clientv3.Value(key), "=", "invalid")
	}
	return clientv3.Compare(clientv3.Value(key), "=", FormatEpoch(epoch))
}

// ReadEpoch returns the cluster's epoch: 1 if the key is missing, an error
// wrapping ErrInvalidEpoch if the stored value is malformed (or is epoch 1,
// which is never stored). It is a linearizable read.
func ReadEpoch(ctx context.Context, cli *clientv3.Client, prefix string) (uint16, error) {
	resp, err := cli.Get(ctx, EpochKey(prefix))
	if err != nil {
		return 0, fmt.Errorf("shard: read epoch: %w", err)
	}
	return epochOf(resp.Kvs)
}

func epochOf(kvs []*mvccpb.KeyValue) (uint16, error) {
	if len(kvs) == 0 {
		return MinEpoch, nil
	}
	e, err := ParseEpoch(kvs[0].Value)
	if err == nil && e == MinEpoch {
		// EpochCompare(1) tests for the missing key, so a stored "00001"
		// would read as 1 yet fence as nothing: report it.
		return 0, fmt.Errorf("%w: stored epoch %q: epoch %d is the missing key, never a value", ErrInvalidEpoch, kvs[0].Value, MinEpoch)
	}
	return e, err
}

// BumpEpoch moves the cluster's epoch from from to to, in one txn that
// succeeds only if the epoch is still from. It requires from < to. If the
// epoch already is to (a retried bump whose reply was lost), it returns nil.
// If the epoch is anything else, it returns an error wrapping
// ErrEpochConflict that names the epoch found. A cluster that joins at
// epoch e reads 1 (or whatever it last obeyed) and is bumped from that to e.
func BumpEpoch(ctx context.Context, cli *clientv3.Client, prefix string, from, to uint16) error {
	if err := checkEpoch("from", from); err != nil {
		return err
	}
	if err := checkEpoch("to", to); err != nil {
		return err
	}
	if to <= from {
		return fmt.Errorf("%w: bump from %d to %d does not move forward", ErrInvalidEpoch, from, to)
	}
	key := EpochKey(prefix)
	resp, err := cli.Txn(ctx).
		If(EpochCompare(prefix, from)).
		Then(clientv3.OpPut(key, FormatEpoch(to))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("shard: bump epoch %d→%d: %w", from, to, err)
	}
	if resp.Succeeded {
		return nil
	}
	cur, err := epochOf(resp.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return err
	}
	if cur == to {
		return nil
	}
	return fmt.Errorf("%w: bump %d→%d found epoch %d at %s", ErrEpochConflict, from, to, cur, key)
}
