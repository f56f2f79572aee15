package locks

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/queue"
)

// watchRetry is the pause before a broken shard watch resumes.
const watchRetry = time.Second

// WatchBatch is one shard's part of a fleet watch.
type WatchBatch struct {
	// Shard names the shard.
	Shard string
	queue.WatchBatch
	// Resync: the shard's history is gone, and a snapshot follows.
	Resync bool
	// Err ends the shard's watch: a bad revision
	// (queue.ErrInvalidArgument) or the watch budget spent
	// (queue.ErrWatchBudget).
	Err error
}

// Watch watches tenant's locks under prefix on every shard of the map at
// once, each from its revision in from (none: a snapshot first), and
// returns the shards it watches and their batches. A broken shard watch
// resumes on its own from its last revision (a revision moves only when a
// snapshot is complete or a batch of events is taken); one whose history
// was compacted sends a Resync batch and a fresh snapshot. Watches do not
// go through the shards' breakers: a watch is one long call, and it
// retries on its own. The channel closes once ctx has ended and every
// shard's watch with it; its reader must go on reading until then or
// cancel ctx.
func (r *Router) Watch(ctx context.Context, tenant, prefix string, from map[string]int64) ([]string, <-chan WatchBatch, error) {
	targets, err := r.All(tenant)
	if err != nil {
		return nil, nil, err
	}
	shards := make([]string, len(targets))
	starts := make([]int64, len(targets))
	for i, t := range targets {
		shards[i], starts[i] = t.Shard, from[t.Shard]
	}
	ch := make(chan WatchBatch)
	go func() {
		defer close(ch)
		var wg sync.WaitGroup
		for i, t := range targets {
			wg.Go(func() { r.watchShard(ctx, t, prefix, starts[i], ch) })
		}
		wg.Wait()
	}()
	return shards, ch, nil
}

// watchShard runs one shard's watch until ctx ends, resuming it when it
// breaks and starting over with a snapshot when its history is gone.
func (r *Router) watchShard(ctx context.Context, t Target, prefix string, from int64, out chan<- WatchBatch) {
	send := func(b WatchBatch) bool {
		select {
		case out <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	restarted := false
	for {
		if from == 0 && restarted && !send(WatchBatch{Shard: t.Shard, Resync: true}) {
			return // a snapshot broke off: the next one replaces it
		}
		restarted = true
		err := t.Engine.WatchLocks(ctx, prefix, from, func(b queue.WatchBatch) error {
			if !send(WatchBatch{Shard: t.Shard, WatchBatch: b}) {
				return ctx.Err()
			}
			if !b.Snapshot || b.SnapshotDone {
				from = b.Revision
			}
			return nil
		})
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, queue.ErrCompacted):
			r.cfg.Log.Info("watch history compacted: resyncing", "shard", t.Shard, "revision", from)
			from = 0
			continue
		case errors.Is(err, queue.ErrInvalidArgument), errors.Is(err, queue.ErrWatchBudget):
			send(WatchBatch{Shard: t.Shard, Err: err})
			return
		}
		r.cfg.Log.Debug("shard watch broke: resuming", "shard", t.Shard, "revision", from, "err", err)
		if !clock.Sleep(ctx, r.cfg.Clock, watchRetry) {
			return
		}
	}
}
