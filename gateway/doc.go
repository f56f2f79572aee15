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
// A handler decodes, checks what only the wire knows (id signatures,
// tenancy, policy, rate limits, body and message sizes), makes one call
// into the fleet ([locks.Router]: routing, resharding handovers, circuit
// breakers, fan-out over shards) and encodes its answer. Its errors are
// returned as they are and translated once, innermost (toConnect; the REST
// API maps the same translation onto its statuses). Telemetry is labelled
// from a record in the call's context, with a [locks.Note] in which the
// fleet writes the shard it routed to; the handler adds the shard that
// granted and any outcome that is not an error (busy, not_held, a lost
// lease). Nothing re-routes a name, re-parses a body or reads a
// response's bytes.
//
// The dependencies point down: gateway → locks (the fleet) → queue and
// shard.
package gateway
