package locks

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/queue"
)

// Target is the shard one call goes to, as [Router.Route] or
// [Router.Lookup] found it: route a name once per call and pass the Target
// down.
type Target struct {
	// Shard names the etcd cluster.
	Shard string
	// Engine is the cluster's lock engine, acting in the call's tenant's
	// key space.
	Engine *queue.Engine
	// Backend is the cluster: its client and circuit breaker.
	Backend *Backend
	// Epoch is the shard-map epoch new waiters are enqueued under; zero
	// for a Target found by Lookup, which serves only existing locks and
	// sessions.
	Epoch uint16
	// Guards fence new enqueues (see queue.AcquireRequest.Guards): they
	// hold only while the cluster obeys Epoch.
	Guards []clientv3.Cmp
	// Previous is the shard the name is moving away from while it drains;
	// nil when the name did not move. A waiter on this shard is granted
	// only once Previous holds no key of the name.
	Previous *Target
}
