package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/shard"
)

// The fleet's id keys (see gateway/idkeys.go) live in the home cluster at
// <prefix>/meta/id-keys, in the text form of gateway.ParseIDKeys, unless
// --id-keys-file names a file. The first gateway to start creates them;
// every gateway follows changes with a watch, and one that is asked to
// verify an id signed with a key it does not know yet reads them again, so
// `leasegate id-keys rotate` takes effect fleet-wide at once. Whoever can
// read that key can mint ids — but whoever can read etcd can already read
// or delete every lock; the etcd role of docs/security.md covers both.

// IDKeysKey is the etcd key the fleet's id keys live at, under prefix.
func IDKeysKey(prefix string) string { return prefix + "/meta/id-keys" }

// LoadIDKeys reads the fleet's id keys from the home cluster, creating
// them on first use. It returns them with their mod revision.
func LoadIDKeys(ctx context.Context, cli *clientv3.Client, prefix string) (*gateway.IDKeys, int64, error) {
	key := IDKeysKey(prefix)
	for {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			return nil, 0, fmt.Errorf("read id keys: %w", err)
		}
		if len(resp.Kvs) > 0 {
			k, err := gateway.ParseIDKeys(resp.Kvs[0].Value)
			if err != nil {
				return nil, 0, fmt.Errorf("id keys at %s: %w", key, err)
			}
			return k, resp.Kvs[0].ModRevision, nil
		}
		first, err := gateway.GenerateIDKey(1)
		if err != nil {
			return nil, 0, err
		}
		k, err := gateway.NewIDKeys(first)
		if err != nil {
			return nil, 0, err
		}
		// Create only if absent: two gateways starting together agree on
		// whichever wrote first.
		tx, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(k.Format()))).Commit()
		if err != nil {
			return nil, 0, fmt.Errorf("store id keys: %w", err)
		}
		if tx.Succeeded {
			return k, tx.Header.Revision, nil
		}
	}
}

// UpdateIDKeys applies change to the stored keys with a compare-and-swap,
// retrying on conflict, and returns the keys it stored.
func UpdateIDKeys(ctx context.Context, cli *clientv3.Client, prefix string, change func(*gateway.IDKeys) (*gateway.IDKeys, error)) (*gateway.IDKeys, error) {
	key := IDKeysKey(prefix)
	for {
		cur, rev, err := LoadIDKeys(ctx, cli, prefix)
		if err != nil {
			return nil, err
		}
		next, err := change(cur)
		if err != nil {
			return nil, err
		}
		tx, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(next.Format()))).Commit()
		if err != nil {
			return nil, fmt.Errorf("store id keys: %w", err)
		}
		if tx.Succeeded {
			return next, nil
		}
	}
}

// LoadIDKeysFile reads a keyring file (gateway.ParseIDKeys's form). It
// refuses a file others may read: it holds the fleet's signing keys.
func LoadIDKeysFile(path string) (*gateway.IDKeys, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("id keys file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("id keys file %s is readable by others (mode %o); want 0600 or 0400", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("id keys file: %w", err)
	}
	k, err := gateway.ParseIDKeys(b)
	if err != nil {
		return nil, fmt.Errorf("id keys file %s: %w", path, err)
	}
	return k, nil
}

// storedIDKeys is the fleet's keyring as stored in etcd, followed by a
// watch. It implements gateway.IDKeyring.
type storedIDKeys struct {
	cli    *clientv3.Client
	prefix string
	log    *slog.Logger
	cur    atomic.Pointer[gateway.IDKeys]

	mu         sync.Mutex
	lastReload time.Time

	cancel context.CancelFunc
	done   chan struct{}
}

// followIDKeys loads the stored keys and follows them until close.
func followIDKeys(ctx context.Context, cli *clientv3.Client, prefix string, log *slog.Logger) (*storedIDKeys, error) {
	k, rev, err := LoadIDKeys(ctx, cli, prefix)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	s := &storedIDKeys{cli: cli, prefix: prefix, log: log, cancel: cancel, done: make(chan struct{})}
	s.cur.Store(k)
	go s.watch(wctx, rev+1)
	return s, nil
}

func (s *storedIDKeys) Signing() gateway.IDKey { return s.cur.Load().Signing() }

// Lookup finds key id; a miss makes it read the stored keys again (at most
// once a second), in case a rotation's watch event is still on its way.
func (s *storedIDKeys) Lookup(id uint8) (gateway.IDKey, bool) {
	if k, ok := s.cur.Load().Lookup(id); ok {
		return k, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.lastReload) < time.Second {
		return s.cur.Load().Lookup(id)
	}
	s.lastReload = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if k, _, err := LoadIDKeys(ctx, s.cli, s.prefix); err == nil {
		s.cur.Store(k)
	}
	return s.cur.Load().Lookup(id)
}

func (s *storedIDKeys) watch(ctx context.Context, rev int64) {
	defer close(s.done)
	key := IDKeysKey(s.prefix)
	for ctx.Err() == nil {
		for wr := range s.cli.Watch(clientv3.WithRequireLeader(ctx), key, clientv3.WithRev(rev)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				rev = ev.Kv.ModRevision + 1
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				k, err := gateway.ParseIDKeys(ev.Kv.Value)
				if err != nil {
					s.log.Error("stored id keys do not parse; keeping the previous ones", "err", err)
					continue
				}
				s.cur.Store(k)
				s.log.Info("id keys changed", "signing_key", k.Signing().ID, "keys", len(k.Keys()))
			}
		}
		if ctx.Err() != nil {
			return
		}
		// Compacted or failed: read again and resume from there.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		k, r, err := LoadIDKeys(rctx, s.cli, s.prefix)
		cancel()
		if err == nil {
			s.cur.Store(k)
			rev = r + 1
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *storedIDKeys) close() {
	s.cancel()
	<-s.done
}

var _ gateway.IDKeyring = (*storedIDKeys)(nil)

// idKeysPrefix is the key prefix the id keys live under: the engines' own.
func idKeysPrefix(prefix string) string {
	if prefix = strings.TrimSuffix(prefix, "/"); prefix == "" {
		return shard.DefaultPrefix
	}
	return prefix
}
