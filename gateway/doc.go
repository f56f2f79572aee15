// Package gateway is leasegate's wire API: the Connect service
// leasegate.v1.LockService (Connect, gRPC and gRPC-Web on one port), the
// REST JSON API (/api/v1/locks/acquire|renew|release), health checks and
// server reflection.
//
// The gateway keeps no state that a restart loses. A lock id carries the
// shard, lease, key revision and the holder's 128-bit secret, so any gateway
// process can renew or release any lock, and a retried Acquire with the same
// request id resumes its queue place on any process.
package gateway
