package gateway_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// flipped returns s with byte i of its decoded form changed.
func flipped(t *testing.T, s string, i int) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	b[i] ^= 0x01
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodedLen(t *testing.T, s string) int {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// An edited lock id — any byte of it — is refused before etcd is touched,
// over Connect and REST, and disturbs nothing.
func TestTamperedLockIDsAreRefused(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	victim := tryAcquire(t, g, "victim")
	mine := tryAcquire(t, g, "mine")
	ctx := ctxT(t)
	for i := 0; i < decodedLen(t, mine.LockId); i++ {
		forged := flipped(t, mine.LockId, i)
		_, err := g.Client.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: forged, FencingToken: mine.FencingToken}))
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("Renew with byte %d flipped = %v; want invalid_argument", i, err)
		}
		_, err = g.Client.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: forged, FencingToken: mine.FencingToken}))
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("Release with byte %d flipped = %v; want invalid_argument", i, err)
		}
		status, body := postJSON(t, g, "/api/v1/locks/release", fmt.Sprintf(`{"lockId":%q,"fencingToken":%d}`, forged, mine.FencingToken))
		if status != http.StatusBadRequest {
			t.Fatalf("REST release with byte %d flipped = %d %v; want 400", i, status, body)
		}
	}
	for _, gr := range []*v1.Granted{victim, mine} {
		if _, err := g.Client.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: gr.LockId, FencingToken: gr.FencingToken})); err != nil {
			t.Fatalf("Renew of an untouched lock after the forgeries: %v", err)
		}
	}
}

// Even an id re-signed with the fleet's own key (a stolen key) whose lease
// field names another lock's lease revokes nothing: the engine compares
// the lease with etcd's and revokes only what it read back.
func TestResignedLockIDWithAnotherLeaseRevokesNothing(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	victim := tryAcquire(t, g, "victim")
	mine := tryAcquire(t, g, "mine")
	ctx := ctxT(t)
	resp, err := etcdClient(t).Get(ctx, server.IDKeysKey(g.Prefix))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("read the fleet's id keys: %v", err)
	}
	keys, err := gateway.ParseIDKeys(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	v, err := gateway.DecodeLockID(keys, victim.LockId)
	if err != nil {
		t.Fatal(err)
	}
	m, err := gateway.DecodeLockID(keys, mine.LockId)
	if err != nil {
		t.Fatal(err)
	}
	m.Handle.Lease = v.Handle.Lease
	forged := gateway.EncodeLockID(keys, m)
	_, err = g.Client.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: forged, FencingToken: mine.FencingToken}))
	if codeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("Release of own lock under a neighbour's lease = %v; want permission_denied", err)
	}
	for _, gr := range []*v1.Granted{victim, mine} {
		if _, err := g.Client.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: gr.LockId, FencingToken: gr.FencingToken})); err != nil {
			t.Fatalf("Renew after the forged release: %v", err)
		}
	}
}

// An edited session id is refused too, so nothing acts on a lease it names.
func TestTamperedSessionIDsAreRefused(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	s, err := g.Client.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: "s", TtlMs: 10000}))
	if err != nil {
		t.Fatal(err)
	}
	id := s.Msg.SessionId
	for i := 0; i < decodedLen(t, id); i++ {
		forged := flipped(t, id, i)
		if _, err := g.Client.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: forged})); codeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("KeepAliveSession with byte %d flipped = %v; want invalid_argument", i, err)
		}
		_, err := g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "s-lock", SessionId: forged}))
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("TryAcquire with a session id with byte %d flipped = %v; want invalid_argument", i, err)
		}
	}
	if _, err := g.Client.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: id})); err != nil {
		t.Fatalf("the real session after the forgeries: %v", err)
	}
}

// A request id is a retry key for its caller, never a way into someone
// else's waiter: another subject, or the same subject with another client
// id, is refused; the caller itself resumes.
func TestRequestIDBelongsToItsCaller(t *testing.T) {
	t.Parallel()
	const tokenA2 = "token-of-tenant-a-second-subject"
	g := startSecureGateway(t, func(c *server.Config) {
		tokens := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(tokens, []byte(tokenA+" a worker-a\n"+tokenA2+" a worker-a2\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.Gateway.Auth.TokensFile = tokens
	})
	ctx := ctxT(t)
	owner := as(g, tokenA)
	held, err := owner.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "job", TtlMs: 10000, ClientId: "w1", RequestId: "job-42"}))
	if err != nil || !held.Msg.Acquired {
		t.Fatalf("TryAcquire = %v, %v", held, err)
	}
	for what, try := range map[string]func() error{
		"another subject": func() error {
			_, err := as(g, tokenA2).TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "job", TtlMs: 10000, ClientId: "w1", RequestId: "job-42"}))
			return err
		},
		"another client id": func() error {
			_, err := owner.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "job", TtlMs: 10000, ClientId: "w2", RequestId: "job-42"}))
			return err
		},
		"another subject, streaming": func() error {
			st, err := as(g, tokenA2).Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: "job", TtlMs: 10000, ClientId: "w1", RequestId: "job-42", WaitTimeoutMs: 1000}))
			if err != nil {
				return err
			}
			defer st.Close()
			for st.Receive() {
				if st.Msg().GetGranted() != nil {
					return fmt.Errorf("granted the owner's lock")
				}
			}
			return st.Err()
		},
	} {
		if err := try(); codeOf(err) != connect.CodePermissionDenied {
			t.Errorf("a retry of another caller's request id by %s = %v; want permission_denied", what, err)
		}
	}
	again, err := owner.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "job", TtlMs: 10000, ClientId: "w1", RequestId: "job-42"}))
	if err != nil || !again.Msg.Acquired || again.Msg.Granted.FencingToken != held.Msg.Granted.FencingToken {
		t.Fatalf("the owner's own retry = %v, %v; want the same grant", again, err)
	}
}

// Two calls with one request id act as one waiter: the later takes it
// over, and the earlier ends with aborted/SUPERSEDED instead of waiting
// on, or cleaning up, a waiter that is no longer its own.
func TestSecondCallWithTheSameRequestIDSupersedesTheFirst(t *testing.T) {
	t.Parallel()
	g1 := startGateway(t, "")
	g2 := startGateway(t, g1.Prefix)
	holder := tryAcquire(t, g1, "x")
	req := &v1.AcquireRequest{Name: "x", TtlMs: 10000, ClientId: "w", RequestId: "one-call"}
	first := startWaiter(t, g1, req)
	if p := <-first.positions; p != 1 {
		t.Fatalf("first call's position = %d; want 1", p)
	}
	second := startWaiter(t, g2, req)
	<-second.positions
	if err := <-first.err; codeOf(err) != connect.CodeAborted || reasonOf(err) != "SUPERSEDED" {
		t.Fatalf("the first call after the second took over = %v (%s); want aborted SUPERSEDED", err, reasonOf(err))
	}
	release(t, g1, holder)
	gr := <-second.granted
	if gr == nil {
		t.Fatalf("the second call ended without a grant: %v", <-second.err)
	}
	release(t, g2, gr)
}
