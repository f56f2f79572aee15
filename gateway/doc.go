// Package gateway is leasegate's wire API: the Connect services
// leasegate.v1.LockService and leasegate.v1.ElectionService (Connect, gRPC
// and gRPC-Web on one port; an election is a lock underneath, see
// Elections), the REST JSON API (/api/v1/locks/acquire|renew|release),
// health checks and server reflection.
//
// The gateway keeps no state that a restart loses. A lock id carries the
// shard, lease, key revision and the holder's 128-bit secret, so any gateway
// process can renew or release any lock, and a retried Acquire with the same
// request id resumes its queue place on any process.
//
// A call goes through three steps, each in one place:
//
//   - routing: the handler routes the name once, through the
//     [locks.Router] the service was built with (Service.route, which also
//     makes the leasegate.route span), and passes the [locks.Target] down;
//     calls on a lock or session id look its shard up instead.
//   - errors: handlers return the engine's, the router's and their own
//     errors as they are; one interceptor, innermost, turns them into
//     Connect codes, ErrorInfo reasons and details (toConnect), and the REST
//     API maps the same translation onto its statuses and bodies.
//   - telemetry: the Connect interceptor and the REST wrapper put a record
//     in the call's context; the handler writes into it the shard it routed
//     to or was granted on and any outcome that is not an error (busy,
//     not_held, a lost lease), and the wrapper labels the metrics, span and
//     log line by it when the call returns. Nothing re-routes a name,
//     re-parses a body or reads a response's bytes.
//
// The dependencies point down: gateway → locks → queue and shard.
package gateway
