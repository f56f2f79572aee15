package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keepAliver renews leases over one long-lived LeaseKeepAlive stream shared
// by every renew of the engine. etcd's leader renews leases in memory, so a
// renewal is cheap for etcd; opening a gRPC stream per renewal is not. Many
// concurrent renewals of one lease are answered by one response.
type keepAliver struct {
	cli *clientv3.Client

	mu      sync.Mutex
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	gen     uint64
	pending map[int64][]chan keepAliveResult
	closed  bool
	wg      sync.WaitGroup
}

type keepAliveResult struct {
	ttl int64
	err error
}

func newKeepAliver(cli *clientv3.Client) *keepAliver {
	return &keepAliver{cli: cli, pending: make(map[int64][]chan keepAliveResult)}
}

// errLeaseNotFound is returned when etcd answers a keepalive with TTL ≤ 0.
var errLeaseNotFound = errors.New("lease not found")

// renew sends one keepalive for id and returns the TTL etcd granted, in
// seconds. It returns errLeaseNotFound when the lease has expired or was
// revoked.
func (k *keepAliver) renew(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	ch := make(chan keepAliveResult, 1)
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return 0, ErrClosed
	}
	if k.stream == nil {
		if err := k.openLocked(); err != nil {
			k.mu.Unlock()
			return 0, err
		}
	}
	k.pending[int64(id)] = append(k.pending[int64(id)], ch)
	first := len(k.pending[int64(id)]) == 1
	var err error
	if first {
		err = k.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)})
	}
	if err != nil {
		k.failLocked(fmt.Errorf("queue: send keepalive: %w", err))
	}
	k.mu.Unlock()

	select {
	case r := <-ch:
		return r.ttl, r.err
	case <-ctx.Done():
		k.mu.Lock()
		list := k.pending[int64(id)]
		for i, c := range list {
			if c == ch {
				k.pending[int64(id)] = append(list[:i], list[i+1:]...)
				break
			}
		}
		// Keep the entry (even empty) until the response arrives so that a
		// new renew does not send a duplicate request in the meantime.
		k.mu.Unlock()
		return 0, ctx.Err()
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
		r := keepAliveResult{ttl: resp.TTL}
		if resp.TTL <= 0 {
			r.err = errLeaseNotFound
		}
		for _, ch := range k.pending[resp.ID] {
			ch <- r
		}
		delete(k.pending, resp.ID)
		k.mu.Unlock()
	}
}

// failLocked fails every pending renewal and drops the stream; the next
// renewal opens a new one.
func (k *keepAliver) failLocked(err error) {
	for id, list := range k.pending {
		for _, ch := range list {
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
