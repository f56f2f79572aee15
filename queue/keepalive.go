package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keepAliver renews leases over one long-lived LeaseKeepAlive stream shared
// by every renew of the engine. etcd's leader renews leases in memory, so a
// renewal is cheap for etcd; opening a gRPC stream per renewal is not. Many
// concurrent renewals of one lease are answered by one response.
type keepAliver struct {
	cli *clientv3.Client
	now func() time.Time

	mu      sync.Mutex
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	gen     uint64
	pending map[int64]*inflight
	closed  bool
	wg      sync.WaitGroup
}

// inflight is one keepalive request sent and not yet answered, with the
// renewals waiting on it.
type inflight struct {
	sent    time.Time
	waiters []chan keepAliveResult
}

type keepAliveResult struct {
	ttl  int64
	sent time.Time
	err  error
}

func newKeepAliver(cli *clientv3.Client, now func() time.Time) *keepAliver {
	return &keepAliver{cli: cli, now: now, pending: make(map[int64]*inflight)}
}

// errLeaseNotFound is returned when etcd answers a keepalive with TTL ≤ 0.
var errLeaseNotFound = errors.New("lease not found")

// renew sends one keepalive for id (or joins one already in flight) and
// returns the TTL etcd granted, in seconds, and when the request that was
// answered was sent: a deadline measured from it is never late. It returns
// errLeaseNotFound when the lease has expired or was revoked.
func (k *keepAliver) renew(ctx context.Context, id clientv3.LeaseID) (int64, time.Time, error) {
	ch := make(chan keepAliveResult, 1)
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return 0, time.Time{}, ErrClosed
	}
	if k.stream == nil {
		if err := k.openLocked(); err != nil {
			k.mu.Unlock()
			return 0, time.Time{}, err
		}
	}
	f := k.pending[int64(id)]
	if f == nil {
		f = &inflight{sent: k.now()}
		k.pending[int64(id)] = f
		if err := k.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
			f.waiters = append(f.waiters, ch)
			k.failLocked(fmt.Errorf("queue: send keepalive: %w", err))
			k.mu.Unlock()
			r := <-ch
			return 0, time.Time{}, r.err
		}
	}
	f.waiters = append(f.waiters, ch)
	k.mu.Unlock()

	select {
	case r := <-ch:
		return r.ttl, r.sent, r.err
	case <-ctx.Done():
		k.mu.Lock()
		if f := k.pending[int64(id)]; f != nil {
			for i, c := range f.waiters {
				if c == ch {
					f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
					break
				}
			}
		}
		// The entry stays until its response arrives, so a new renewal
		// joins it instead of sending a duplicate.
		k.mu.Unlock()
		return 0, time.Time{}, ctx.Err()
	}
}

func (k *keepAliver) openLocked() error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	stream, err := pb.NewLeaseClient(k.cli.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		cancel()
		return fmt.Errorf("queue: open keepalive stream: %w", err)
	}
	k.stream, k.cancel = stream, cancel
	k.gen++
	gen := k.gen
	k.wg.Add(1)
	go k.recvLoop(stream, gen)
	return nil
}

func (k *keepAliver) recvLoop(stream pb.Lease_LeaseKeepAliveClient, gen uint64) {
	defer k.wg.Done()
	for {
		resp, err := stream.Recv()
		k.mu.Lock()
		if k.gen != gen {
			k.mu.Unlock()
			return
		}
		if err != nil {
			k.failLocked(fmt.Errorf("queue: keepalive stream: %w", err))
			k.mu.Unlock()
			return
		}
		if f := k.pending[resp.ID]; f != nil {
			r := keepAliveResult{ttl: resp.TTL, sent: f.sent}
			if resp.TTL <= 0 {
				r.err = errLeaseNotFound
			}
			for _, ch := range f.waiters {
				ch <- r
			}
			delete(k.pending, resp.ID)
		}
		k.mu.Unlock()
	}
}

// failLocked fails every pending renewal and drops the stream; the next
// renewal opens a new one.
func (k *keepAliver) failLocked(err error) {
	for id, f := range k.pending {
		for _, ch := range f.waiters {
			ch <- keepAliveResult{err: err}
		}
		delete(k.pending, id)
	}
	if k.cancel != nil {
		k.cancel()
	}
	k.stream, k.cancel = nil, nil
	k.gen++
}

func (k *keepAliver) close() {
	k.mu.Lock()
	k.closed = true
	k.failLocked(ErrClosed)
	k.mu.Unlock()
	k.wg.Wait()
}
