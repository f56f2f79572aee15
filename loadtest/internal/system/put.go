package system

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Put is one etcd write and nothing else: an Acquire is a Put of a
// 64-byte value to a key of the name's (no lease, no compare), and
// Release does nothing. It is the unit every lock operation's cost is
// counted in: a raft round with an fsync.
type Put struct {
	cli    *clientv3.Client
	prefix string
}

// NewPut returns the Put system on cli under prefix; Close closes cli.
func NewPut(cli *clientv3.Client, prefix string) *Put { return &Put{cli: cli, prefix: prefix} }

// Name implements System.
func (p *Put) Name() string { return "etcd-put" }

// Describe implements System.
func (p *Put) Describe() string {
	return "one etcd Put of a 64-byte value per cycle (no lease, no compare), with clientv3: one raft write"
}

// NewClient implements System.
func (p *Put) NewClient(context.Context) (Client, error) { return putClient{p}, nil }

// Close implements System.
func (p *Put) Close() error { return p.cli.Close() }

type putClient struct{ p *Put }

var putValue = string(make([]byte, 64))

func (c putClient) Acquire(ctx context.Context, name string, onEnqueued func()) (Held, error) {
	resp, err := c.p.cli.Put(ctx, c.p.prefix+"/"+name, putValue)
	if err != nil {
		return nil, fmt.Errorf("put: %w", err)
	}
	once(onEnqueued)()
	return putHeld(resp.Header.Revision), nil
}

func (c putClient) Close(context.Context) error { return nil }

type putHeld int64

func (putHeld) Release(context.Context) error { return nil }
func (h putHeld) Order() int64                { return int64(h) }
