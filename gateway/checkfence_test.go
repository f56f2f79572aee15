package gateway_test

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// wantFence asserts CheckFence(name, token) answers live and current.
func wantFence(t *testing.T, g *gw, name string, token int64, live bool, current int64) {
	t.Helper()
	resp, err := g.Client.CheckFence(ctxT(t), connect.NewRequest(&v1.CheckFenceRequest{Name: name, FencingToken: token}))
	if err != nil {
		t.Fatalf("CheckFence(%q, %d) = %v; want an answer", name, token, err)
	}
	if resp.Msg.Live != live || resp.Msg.CurrentToken != current {
		t.Fatalf("CheckFence(%q, %d) = live %v, current %d; want live %v, current %d",
			name, token, resp.Msg.Live, resp.Msg.CurrentToken, live, current)
	}
}

// revokeHolder ends the lease of name's holder through etcd, as its expiry
// would: the holder is the first-created key under <prefix>/locks/<name>/.
// name must need no escaping in keys.
func revokeHolder(t *testing.T, g *gw, cli *clientv3.Client, name string) {
	t.Helper()
	resp, err := cli.Get(ctxT(t), g.Prefix+"/locks/"+name+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("no holder key with a lease under %s/locks/%s/", g.Prefix, name)
	}
	// A revoke deletes the lease's keys in the same raft entry, exactly
	// as an expiry does, so nothing needs awaiting afterwards.
	if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
}

// awaitGrant returns w's grant, failing if its stream ends without one.
func awaitGrant(t *testing.T, w *waiter) *v1.Granted {
	t.Helper()
	select {
	case gr := <-w.granted:
		return gr
	case err := <-w.err:
		// The stream may end right after its grant, and select picks
		// among ready cases at random: the grant, sent first, is buffered.
		select {
		case gr := <-w.granted:
			return gr
		default:
		}
		t.Fatalf("waiter ended without a grant: %v", err)
	}
	return nil
}

func TestCheckFenceLiveHolderThenRelease(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	gr := tryAcquire(t, g, "cf-release")
	tok := gr.FencingToken
	wantFence(t, g, "cf-release", tok, true, tok)
	wantFence(t, g, "cf-release", tok-1, false, tok) // an older holder's
	wantFence(t, g, "cf-release", tok+1, false, tok) // not granted yet
	wantFence(t, g, "cf-other", tok, false, 0)       // tokens are per name

	release(t, g, gr)
	wantFence(t, g, "cf-release", tok, false, 0)

	// A newer grant after the release: only its token is live.
	again := tryAcquire(t, g, "cf-release")
	if again.FencingToken <= tok {
		t.Fatalf("token after re-acquire = %d; want above %d", again.FencingToken, tok)
	}
	wantFence(t, g, "cf-release", tok, false, again.FencingToken)
	wantFence(t, g, "cf-release", again.FencingToken, true, again.FencingToken)
	release(t, g, again)
}

func TestCheckFenceFalseAfterExpiry(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	cli := etcdClient(t)
	gr := tryAcquire(t, g, "cf-expiry")
	wantFence(t, g, "cf-expiry", gr.FencingToken, true, gr.FencingToken)
	revokeHolder(t, g, cli, "cf-expiry")
	wantFence(t, g, "cf-expiry", gr.FencingToken, false, 0)
}

// TestCheckFenceFalseAfterNewerGrant is the fencing dance as
// CheckFence sees it: A's lease expires while B waits, B is granted, and
// A's token is no longer live.
func TestCheckFenceFalseAfterNewerGrant(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	cli := etcdClient(t)
	a := tryAcquire(t, g, "cf-newer")
	w := startWaiter(t, g, &v1.AcquireRequest{Name: "cf-newer", TtlMs: 10000, ClientId: "b"})
	defer w.cancel()
	select {
	case <-w.positions:
	case err := <-w.err:
		t.Fatalf("waiter ended before it queued: %v", err)
	}
	wantFence(t, g, "cf-newer", a.FencingToken, true, a.FencingToken)

	revokeHolder(t, g, cli, "cf-newer")
	b := awaitGrant(t, w)
	if b.FencingToken <= a.FencingToken {
		t.Fatalf("B's token %d; want above A's %d", b.FencingToken, a.FencingToken)
	}
	wantFence(t, g, "cf-newer", a.FencingToken, false, b.FencingToken)
	wantFence(t, g, "cf-newer", b.FencingToken, true, b.FencingToken)
	release(t, g, b)
}

func TestCheckFenceInvalidArgument(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	for _, tc := range []struct {
		name  string
		token int64
		field string
	}{
		{"", 1, "name"},
		{"bad\nname", 1, "name"},
		{strings.Repeat("x", 257), 1, "name"},
		{"cf-invalid", 0, "fencing_token"},
		{"cf-invalid", -7, "fencing_token"},
	} {
		_, err := g.Client.CheckFence(ctxT(t), connect.NewRequest(&v1.CheckFenceRequest{Name: tc.name, FencingToken: tc.token}))
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("CheckFence(%.20q, %d) = %v; want invalid_argument", tc.name, tc.token, err)
			continue
		}
		if f := violatedField(err); f != tc.field {
			t.Errorf("CheckFence(%.20q, %d) names field %q; want %q", tc.name, tc.token, f, tc.field)
		}
	}
}

// violatedField is the field named by err's BadRequest detail, if any.
func violatedField(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if br, ok := v.(*errdetails.BadRequest); ok && len(br.FieldViolations) > 0 {
				return br.FieldViolations[0].Field
			}
		}
	}
	return ""
}
