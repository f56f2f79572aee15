package gateway_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

// Golden ids (docs/releasing.md): a gateway of version N accepts the lock
// and session ids a gateway of version N−1 issued, so a rolling upgrade
// keeps every held lock and open session. testdata/golden-ids holds ids
// encoded by released code, one file per release point; the current code
// must decode each to the fields it was made from, and a gateway over real
// etcd must take each as an id (answering for the lock or session it names)
// rather than refuse it as malformed.
//
// The files are written only when a release is cut, from that release's
// code:
//
//	go test ./gateway -run 'TestGoldenIDs$' -golden.write=vX.Y.Z
//
// and never rewritten to make a failing test pass.
var goldenWrite = flag.String("golden.write", "", "write testdata/golden-ids/`RELEASE`.json from the current code, then check it")

// goldenKeys is the fixed id key the golden ids are signed with.
func goldenKeys(t *testing.T) *gateway.IDKeys {
	t.Helper()
	k, err := gateway.NewIDKeys(gateway.IDKey{ID: 9, Secret: []byte("leasegate golden id key, tests only")})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// goldenFile is one release point's ids.
type goldenFile struct {
	Locks    []goldenLock    `json:"locks"`
	Sessions []goldenSession `json:"sessions"`
}

type goldenLock struct {
	What string         `json:"what"`
	ID   string         `json:"id"`
	Want gateway.LockID `json:"want"`
}

type goldenSession struct {
	What string            `json:"what"`
	ID   string            `json:"id"`
	Want gateway.SessionID `json:"want"`
}

// goldenFixtures are the ids each release point encodes: every shape of
// id the gateway issues. Shard "main" is gwtest's cluster, so a gateway
// in the test looks the ids' locks and sessions up.
func goldenFixtures(keys gateway.IDKeyring) goldenFile {
	secret := queue.Secret{0x5e, 0xc7, 0x3e, 0x70, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	h := queue.Handle{
		Name: "golden/plain", WaiterID: "0123456789abcdef0123456789abcdef",
		Lease: 0x694d8a1b2c3d4e5f, Revision: 4242, Epoch: 3, Secret: secret,
	}
	sess := h
	sess.Name, sess.Session = "golden/session", true
	hold := sess
	hold.Name, hold.HoldID = "golden/hold", "fedcba9876543210fedcba9876543210"
	var f goldenFile
	for _, l := range []struct {
		what string
		id   gateway.LockID
	}{
		{"a lock held on its own lease", gateway.LockID{Shard: "main", Handle: h}},
		{"a lock held under a session", gateway.LockID{Shard: "main", Handle: sess}},
		{"one hold of a re-entered lock", gateway.LockID{Shard: "main", Handle: hold}},
	} {
		f.Locks = append(f.Locks, goldenLock{What: l.what, ID: gateway.EncodeLockID(keys, l.id), Want: l.id})
	}
	s := gateway.SessionID{Leases: []gateway.ShardLease{{Shard: "main", Lease: 0x694d8a1b2c3d4f00}}, Secret: secret}
	f.Sessions = append(f.Sessions, goldenSession{What: "a session on one shard", ID: gateway.EncodeSessionID(keys, s), Want: s})
	return f
}

func TestGoldenIDs(t *testing.T) {
	keys := goldenKeys(t)
	dir := filepath.Join("testdata", "golden-ids")
	if *goldenWrite != "" {
		b, err := json.MarshalIndent(goldenFixtures(keys), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, *goldenWrite+".json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden ids in %s (%v)", dir, err)
	}

	keyFile := filepath.Join(t.TempDir(), "id-keys")
	if err := os.WriteFile(keyFile, keys.Format(), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGatewayWith(t, func(c *server.Config) { c.IDKeysFile = keyFile })

	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var f goldenFile
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(f.Locks) == 0 || len(f.Sessions) == 0 {
			t.Fatalf("%s: %d lock ids and %d session ids; want some of each", file, len(f.Locks), len(f.Sessions))
		}
		release := strings.TrimSuffix(filepath.Base(file), ".json")
		for _, l := range f.Locks {
			t.Run(fmt.Sprintf("%s/lock/%s", release, l.What), func(t *testing.T) {
				got, err := gateway.DecodeLockID(keys, l.ID)
				if err != nil {
					t.Fatalf("DecodeLockID: %v", err)
				}
				if !reflect.DeepEqual(got, l.Want) {
					t.Fatalf("DecodeLockID = %+v; want %+v", got, l.Want)
				}
				resp, err := g.Client.Renew(ctxT(t), connect.NewRequest(&v1.RenewRequest{LockId: l.ID, FencingToken: l.Want.Handle.Token(), TtlMs: 10000}))
				checkTakenAsID(t, "Renew", resp, err, "LOCK_EXPIRED")
			})
		}
		for _, s := range f.Sessions {
			t.Run(fmt.Sprintf("%s/session/%s", release, s.What), func(t *testing.T) {
				got, err := gateway.DecodeSessionID(keys, s.ID)
				if err != nil {
					t.Fatalf("DecodeSessionID: %v", err)
				}
				if !reflect.DeepEqual(got, s.Want) {
					t.Fatalf("DecodeSessionID = %+v; want %+v", got, s.Want)
				}
				resp, err := g.Client.KeepAliveSession(ctxT(t), connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: s.ID}))
				checkTakenAsID(t, "KeepAliveSession", resp, err, "SESSION_LOST")
			})
		}
	}
}

// checkTakenAsID fails t unless the gateway answered for the lock or
// session the id names with reason want: that lock or session is not in
// etcd, so the answer is that it is gone (LOCK_EXPIRED, SESSION_LOST) —
// after the id's tag, fields and fencing token were accepted — never that
// the id is malformed or not the caller's.
func checkTakenAsID[T any](t *testing.T, rpc string, resp *connect.Response[T], err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s with a golden id = %v; want reason %s", rpc, resp.Msg, want)
	}
	if got := reasonOf(err); got != want {
		t.Fatalf("%s with a golden id: %v (reason %q); want reason %s", rpc, err, got, want)
	}
}
