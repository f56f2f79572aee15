package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keepAliver renews leases over long-lived LeaseKeepAlive streams shared by
// every renewal of the engine: etcd's leader renews leases in memory, so a
// renewal is cheap for etcd, but a gRPC stream per renewal is not. Two
// facts of etcd's side shape it:
//
//   - A stream's requests are answered one at a time, in the order sent.
//     So each stream keeps its requests in one FIFO and matches every
//     answer to its head: an answer is never credited to a later request.
//   - Renewing a lease that has expired but is not yet revoked blocks until
//     etcd revokes it, and revocations are rate-limited (1,000/s by
//     default), holding up every request behind it on its stream. So a new
//     request is never queued behind one that has waited longer than
//     stuckAfter: it goes to another stream, opened if needed, up to
//     maxStreams; and a request already queued behind a stuck one is sent
//     again elsewhere.
//
// A renewal may join a request for the same lease already in flight only
// if it was sent at most joinWindow before the renewal began; it then
// reports that request's send time, so its deadline (send time + TTL)
// stays conservative and the callers' Valid is short by at most
// joinWindow. An older request is never joined: its answer would be
// credited to a renewal that arrived after it was sent.
type keepAliver struct {
	cli *clientv3.Client
	now func() time.Time

	mu      sync.Mutex
	streams []*kaStream
	closed  bool
	wg      sync.WaitGroup
}

const (
	joinWindow = 10 * time.Millisecond
	stuckAfter = 100 * time.Millisecond
	maxStreams = 4
	// idleStream is how long an extra stream may sit unused before it is
	// closed; the first stream stays.
	idleStream = 30 * time.Second
)

// kaStream is one LeaseKeepAlive stream and its requests in flight, in the
// order they were sent.
type kaStream struct {
	stream   pb.Lease_LeaseKeepAliveClient
	cancel   context.CancelFunc
	fifo     []*inflight
	byLease  map[int64]*inflight // the latest request in flight per lease
	lastUsed time.Time
	dead     bool
}

// inflight is one keepalive request sent and not yet answered, with the
// renewals waiting on it.
type inflight struct {
	id      int64
	sent    time.Time // on the engine's clock, for deadlines
	at      time.Time // on the real clock, for joining and stuck streams
	waiters []chan keepAliveResult
}

type keepAliveResult struct {
	ttl  int64
	sent time.Time
	err  error
}

func newKeepAliver(cli *clientv3.Client, now func() time.Time) *keepAliver {
	return &keepAliver{cli: cli, now: now}
}

// errLeaseNotFound is returned when etcd answers a keepalive with TTL ≤ 0.
var errLeaseNotFound = errors.New("lease not found")

// renew sends one keepalive for id (or joins one sent within joinWindow)
// and returns the TTL etcd granted, in seconds, and when the request that
// was answered was sent: a deadline measured from it is never late. It
// returns errLeaseNotFound when the lease has expired or was revoked.
//
// A request that waits longer than stuckAfter behind another one on its
// stream is sent again on another stream; the first answer wins, and its
// own send time is the one reported.
func (k *keepAliver) renew(ctx context.Context, id clientv3.LeaseID) (int64, time.Time, error) {
	ch := make(chan keepAliveResult, 2)
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return 0, time.Time{}, ErrClosed
	}
	// Joining and stuck streams are judged on the real clock: they are
	// about etcd's real latency, whatever clock deadlines are measured on.
	now := time.Now()
	s, f := k.joinable(int64(id), now)
	if f == nil {
		var err error
		if s, err = k.pickLocked(now, nil); err == nil {
			f, err = k.sendOnLocked(s, int64(id), now)
		}
		if err != nil {
			k.mu.Unlock()
			return 0, time.Time{}, err
		}
	}
	f.waiters = append(f.waiters, ch)
	k.mu.Unlock()

	sent := []*inflight{f}
	hedge := time.NewTimer(stuckAfter)
	defer hedge.Stop()
	for {
		select {
		case r := <-ch:
			return r.ttl, r.sent, r.err
		case <-hedge.C:
			k.mu.Lock()
			if !s.dead && len(s.fifo) > 0 && s.fifo[0] != f && slices.Contains(s.fifo, f) {
				now := time.Now()
				if s2, err := k.pickLocked(now, s); err == nil && s2 != s {
					if f2, err := k.sendOnLocked(s2, int64(id), now); err == nil {
						f2.waiters = append(f2.waiters, ch)
						sent = append(sent, f2)
					}
				}
			}
			k.mu.Unlock()
		case <-ctx.Done():
			k.mu.Lock()
			for _, f := range sent {
				f.waiters = slices.DeleteFunc(f.waiters, func(c chan keepAliveResult) bool { return c == ch })
			}
			// The requests stay in their streams' FIFOs: their answers will
			// come, and must be matched to them, not to later requests.
			k.mu.Unlock()
			return 0, time.Time{}, ctx.Err()
		}
	}
}

// inFlight reports whether a keepalive for id is unanswered on any open
// stream: the latest request per lease is the last of them answered on its
// stream, so byLease names it until every one is.
func (k *keepAliver) inFlight(id clientv3.LeaseID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range k.streams {
		if s.byLease[int64(id)] != nil {
			return true
		}
	}
	return false
}

// sendOnLocked sends a keepalive for id on s.
func (k *keepAliver) sendOnLocked(s *kaStream, id int64, now time.Time) (*inflight, error) {
	f := &inflight{id: id, sent: k.now(), at: now}
	if err := s.stream.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
		err = fmt.Errorf("queue: send keepalive: %w", err)
		k.failLocked(s, err)
		return nil, err
	}
	s.fifo = append(s.fifo, f)
	s.byLease[id] = f
	s.lastUsed = now
	return f, nil
}

// joinable finds a request for id in flight that was sent at most
// joinWindow before now.
func (k *keepAliver) joinable(id int64, now time.Time) (*kaStream, *inflight) {
	for _, s := range k.streams {
		if f := s.byLease[id]; f != nil && now.Sub(f.at) <= joinWindow {
			return s, f
		}
	}
	return nil, nil
}

// pickLocked returns a stream other than avoid whose oldest request in
// flight is younger than stuckAfter, opening one if none is and fewer than
// maxStreams are open; otherwise the least stuck. It closes extra streams
// left idle.
func (k *keepAliver) pickLocked(now time.Time, avoid *kaStream) (*kaStream, error) {
	var best *kaStream
	kept := k.streams[:0]
	for i, s := range k.streams {
		if i > 0 && len(s.fifo) == 0 && now.Sub(s.lastUsed) > idleStream {
			s.dead = true
			s.cancel()
			continue
		}
		kept = append(kept, s)
	}
	k.streams = kept
	for _, s := range k.streams {
		if s == avoid {
			continue
		}
		if len(s.fifo) == 0 || now.Sub(s.fifo[0].at) < stuckAfter {
			return s, nil
		}
		if best == nil || s.fifo[0].at.After(best.fifo[0].at) {
			best = s
		}
	}
	if len(k.streams) < maxStreams {
		s, err := k.openLocked()
		if err == nil || best == nil && avoid == nil {
			return s, err
		}
	}
	if best == nil {
		if avoid == nil {
			return nil, errors.New("queue: no keepalive stream")
		}
		return avoid, nil
	}
	return best, nil
}

func (k *keepAliver) openLocked() (*kaStream, error) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	stream, err := pb.NewLeaseClient(k.cli.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("queue: open keepalive stream: %w", err)
	}
	s := &kaStream{stream: stream, cancel: cancel, byLease: map[int64]*inflight{}, lastUsed: time.Now()}
	k.streams = append(k.streams, s)
	k.wg.Add(1)
	go k.recvLoop(s)
	return s, nil
}

func (k *keepAliver) recvLoop(s *kaStream) {
	defer k.wg.Done()
	for {
		resp, err := s.stream.Recv()
		k.mu.Lock()
		if s.dead {
			k.mu.Unlock()
			return
		}
		if err == nil && (len(s.fifo) == 0 || s.fifo[0].id != resp.ID) {
			err = fmt.Errorf("answer for lease %x does not match the request it follows", resp.ID)
		}
		if err != nil {
			k.failLocked(s, fmt.Errorf("queue: keepalive stream: %w", err))
			k.mu.Unlock()
			return
		}
		f := s.fifo[0]
		s.fifo[0] = nil
		s.fifo = s.fifo[1:]
		if s.byLease[f.id] == f {
			delete(s.byLease, f.id)
		}
		r := keepAliveResult{ttl: resp.TTL, sent: f.sent}
		if resp.TTL <= 0 {
			r.err = errLeaseNotFound
		}
		for _, ch := range f.waiters {
			ch <- r
		}
		k.mu.Unlock()
	}
}

// failLocked fails every request in flight on s and drops the stream; the
// next renewal opens another.
func (k *keepAliver) failLocked(s *kaStream, err error) {
	if s.dead {
		return
	}
	s.dead = true
	for _, f := range s.fifo {
		for _, ch := range f.waiters {
			ch <- keepAliveResult{err: err}
		}
	}
	s.fifo, s.byLease = nil, nil
	s.cancel()
	k.streams = slices.DeleteFunc(k.streams, func(o *kaStream) bool { return o == s })
}

func (k *keepAliver) close() {
	k.mu.Lock()
	k.closed = true
	for len(k.streams) > 0 {
		k.failLocked(k.streams[0], ErrClosed)
	}
	k.mu.Unlock()
	k.wg.Wait()
}
