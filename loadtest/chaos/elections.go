//go:build linux

package chaos

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/queue"
)

// Elections in the run.
//
// Campaigners (Config.Campaigners) campaign with the SDK's Election in a
// few elections, lead for a few fenced writes and a proclaim, and resign.
// A term is recorded as an AcquireOp (role campaigner) named by its
// election's key segment (electionOpName), which is what an election is in
// etcd: a lock whose name no lock can have. So every lock checker judges
// elections too, beside the locks of the same names: at most one
// campaigner believed it led an election at any time (belief), each term's
// token is above the last and is backed by its key in etcd (backed), no
// term began while an earlier campaigner's key existed, FIFO among
// campaigners that stayed, no campaigner outlived its wait timeout, the
// register's writes are fenced per election, and nothing is left behind.

// electionNames are the elections campaigners contend for; each lives on
// the cluster its engine name hashes to.
var electionNames = []string{"election-0", "election-1"}

// electionOpName is the name an election's ops are recorded under: the key
// segment of its engine name, as the recorder sees it in etcd.
func electionOpName(name string) string {
	p := queue.NamePrefix("", queue.ElectionName(name)) // "/locks/<segment>/"
	return strings.TrimSuffix(strings.TrimPrefix(p, queue.LocksPrefix("")), "/")
}

// leaderTerm is a leadership as the workload's holders handle a lock.
type leaderTerm struct {
	*client.Leadership
	name string // electionOpName
}

func (t leaderTerm) Release(ctx context.Context) error { return t.Resign(ctx) }
func (t leaderTerm) Name() string                      { return t.name }

// campaign runs one recorded Campaign; it returns the term when elected,
// and follows its Context from then on (AcquireOp.DoneAt).
func (h *Harness) campaign(ctx context.Context, s *sdk, who, election string, wait time.Duration) (heldLock, *AcquireOp) {
	rid := newRequestID()
	op := h.Hist.begin(&AcquireOp{Client: who, Role: "campaigner", Name: electionOpName(election), RequestID: rid, Wait: wait, TTL: h.cfg.TTL, Invoke: time.Now()})
	onQueued := h.recordQueued(op)
	var l *client.Leadership
	c, err := s.forOp(h.Hist, op)
	if err == nil {
		l, err = c.Election(election).Campaign(ctx, []byte(who), client.WithTTL(h.cfg.TTL), client.WithRequestID(rid),
			client.WithWaitTimeout(wait), client.WithOnQueued(onQueued))
	}
	h.complete(ctx, op, err, func() (int64, string, string) { return l.Token(), l.Shard(), l.RequestID() })
	if l == nil {
		return nil, op
	}
	t := leaderTerm{Leadership: l, name: op.Name}
	h.followBelief(t, op)
	return t, op
}

// runCampaigners adds the campaigners to wg; they run until ctx ends.
func (h *Harness) runCampaigners(ctx context.Context, wg *sync.WaitGroup) error {
	for i := range h.cfg.Campaigners {
		who := fmt.Sprintf("c%d", i)
		s, err := h.newSDK(who, nil)
		if err != nil {
			return err
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				election := electionNames[mrand.IntN(len(electionNames))]
				wait := time.Second + time.Duration(mrand.Int64N(int64(3*time.Second)))
				t, op := h.campaign(ctx, s, who, election, wait)
				if t == nil {
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				// A proclaim only changes the value; the leader's term, its
				// fenced writes and its resignation are judged as a lock's.
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_ = t.(leaderTerm).Proclaim(pctx, []byte(fmt.Sprintf("%s@%d", who, t.Token())))
				cancel()
				h.hold(ctx, t, op, who, 1+mrand.IntN(3), time.Duration(10+mrand.IntN(40))*time.Millisecond)
			}
		})
	}
	return nil
}
