package queue

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Grants given up just before their engine closes are still given up:
// Close lets a give-up in flight finish instead of cutting it, or a
// session lock nobody received would stay on the session lease, blocking
// its name for as long as the session lives (a gateway that shuts down
// while a grant is on its way out does exactly this).
func TestGiveUpsRacingCloseStillRemoveTheirKeys(t *testing.T) {
	e, cli := newEngine(t)
	keeper, err := New(cli, e.Config()) // keeps the session alive past e
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(keeper.Close)
	sess, stop := keptSession(t, keeper)
	defer stop()
	ctx := testCtx(t)
	var gs []Grant
	for i := range 8 {
		r := req(fmt.Sprintf("closing-%d", i))
		r.Session, r.SessionSecret = sess.Lease, sess.Secret
		gs = append(gs, mustAcquire(t, e, r))
	}
	for _, g := range gs {
		e.Abandon(ctx, g)
	}
	e.Close()
	for _, g := range gs {
		resp, err := cli.Get(ctx, e.keys.namePrefix(g.Name), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 0 {
			t.Errorf("%s: %d keys left on the live session after its give-up and Close; want 0", g.Name, resp.Count)
		}
	}
}
