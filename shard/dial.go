package shard

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DialCluster is the default way to connect to a cluster of the map: a
// client with TCP keepalives, so a silently dropped connection surfaces as
// an error instead of a stuck watch.
func DialCluster(_ string, endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
	})
}
