package gateway

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// ListLocks pages through the caller tenant's locks across every shard.
func (s *Service) ListLocks(ctx context.Context, req *connect.Request[v1.ListLocksRequest]) (*connect.Response[v1.ListLocksResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("ListLocks is not implemented yet"))
}

// DescribeQueue reports a name's holders and waiters in queue order.
func (s *Service) DescribeQueue(ctx context.Context, req *connect.Request[v1.DescribeQueueRequest]) (*connect.Response[v1.DescribeQueueResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("DescribeQueue is not implemented yet"))
}

// Watch streams the caller tenant's lock events under a prefix.
func (s *Service) Watch(ctx context.Context, req *connect.Request[v1.WatchRequest], stream *connect.ServerStream[v1.WatchResponse]) error {
	return connect.NewError(connect.CodeUnimplemented, errors.New("Watch is not implemented yet"))
}
