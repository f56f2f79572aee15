package fence

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultEtcdPrefix is the key prefix an EtcdGuard uses when given none.
const DefaultEtcdPrefix = "fence"

// tokenWidth is the number of decimal digits a stored token is padded to.
// etcd compares values as byte strings; padded to a fixed width, byte order
// equals numeric order for every non-negative int64 (at most 19 digits).
const tokenWidth = 20

// EtcdGuard fences writes into an etcd cluster. The highest token of a
// resource is stored at TokenKey(resource) as a 20-digit zero-padded decimal;
// a fenced write is one etcd transaction that compares that value and, if the
// token is not stale, applies the caller's operations and stores the token.
// etcd serialises transactions, so the check and the write are atomic.
//
// The keys under the prefix belong to the guard: do not write them yourself,
// and keep the data you fence outside the token keys. An EtcdGuard is safe
// for concurrent use.
type EtcdGuard struct {
	cli    *clientv3.Client
	prefix string
}

// NewEtcdGuard returns a guard that keeps tokens under prefix in the cluster
// behind cli. An empty prefix means DefaultEtcdPrefix; a trailing "/" is
// dropped. The caller keeps ownership of cli. It does not block.
func NewEtcdGuard(cli *clientv3.Client, prefix string) *EtcdGuard {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		prefix = DefaultEtcdPrefix
	}
	return &EtcdGuard{cli: cli, prefix: prefix}
}

// TokenKey returns the key holding resource's highest token:
// <prefix>/<resource>/token. Distinct resources never share a key, because
// the fixed suffix makes the mapping one-to-one.
func (g *EtcdGuard) TokenKey(resource string) string {
	return g.prefix + "/" + resource + "/token"
}

// Write applies ops and records token as resource's highest token in one etcd
// transaction, unless a higher token is already recorded; then it returns a
// *StaleTokenError and applies nothing. ops are ordinary clientv3 operations
// (OpPut, OpDelete, …) and must not touch TokenKey(resource). With no ops,
// Write only records the token. It blocks for one round trip, until ctx is
// done.
func (g *EtcdGuard) Write(ctx context.Context, resource string, token int64, ops ...clientv3.Op) error {
	if err := validate(resource, token); err != nil {
		return err
	}
	key, enc := g.TokenKey(resource), encodeToken(token)
	then := make([]clientv3.Op, 0, len(ops)+1)
	then = append(then, ops...)
	then = append(then, clientv3.OpPut(key, enc))
	// etcd has no OR and no <=, so the transaction asks the opposite
	// question: "is the stored token greater than mine?". A value
	// comparison against a missing key is false in etcd, so a first write
	// lands in the Else branch too.
	resp, err := g.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), ">", enc)).
		Then(clientv3.OpGet(key)).
		Else(then...).
		Commit()
	if err != nil {
		return fmt.Errorf("fence: etcd write of %q with token %d: %w", resource, token, err)
	}
	if !resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 {
		return fmt.Errorf("fence: etcd token key %q vanished during its own transaction", key)
	}
	highest, err := decodeToken(key, kvs[0].Value)
	if err != nil {
		return err
	}
	return stale(resource, token, highest)
}

// Put writes value at key and records token for resource, in one etcd
// transaction, unless token is stale. It is Write with one OpPut.
func (g *EtcdGuard) Put(ctx context.Context, resource string, token int64, key, value string) error {
	return g.Write(ctx, resource, token, clientv3.OpPut(key, value))
}

// Accept records token as the highest token for resource unless it is lower
// than the current highest. It is Write with no operations of its own.
func (g *EtcdGuard) Accept(ctx context.Context, resource string, token int64) error {
	return g.Write(ctx, resource, token)
}

// Highest returns the highest token recorded for resource, and false if none
// was. It is one linearizable read.
func (g *EtcdGuard) Highest(ctx context.Context, resource string) (int64, bool, error) {
	if resource == "" {
		return 0, false, ErrEmptyResource
	}
	key := g.TokenKey(resource)
	resp, err := g.cli.Get(ctx, key)
	if err != nil {
		return 0, false, fmt.Errorf("fence: etcd read of %q: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil
	}
	token, err := decodeToken(key, resp.Kvs[0].Value)
	if err != nil {
		return 0, false, err
	}
	return token, true, nil
}

// encodeToken pads a non-negative token to tokenWidth digits.
func encodeToken(token int64) string {
	return fmt.Sprintf("%0*d", tokenWidth, token)
}

// decodeToken parses a stored token, refusing values this package did not
// write: a value of another width would break the byte-order comparison.
func decodeToken(key string, v []byte) (int64, error) {
	if len(v) != tokenWidth {
		return 0, fmt.Errorf("fence: etcd key %q holds %q; want a %d-digit token", key, v, tokenWidth)
	}
	token, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || token < 0 {
		return 0, fmt.Errorf("fence: etcd key %q holds %q; want a %d-digit token", key, v, tokenWidth)
	}
	return token, nil
}
