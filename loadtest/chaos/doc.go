// Package chaos is leasegate's Jepsen-style safety harness: real etcd member
// processes, real gateway processes, SDK clients, a fault injector (the
// nemesis) and checkers over the recorded history and the etcd revision
// history.
//
// A run starts two etcd clusters of three member processes each (the hidden
// `leasegate etcd-member` command), two gateway processes (`leasegate
// --etcd …`) that reach every member through a fault proxy, and client
// workers that reach the gateways through fault proxies too. Workers take
// locks with the Go SDK and write their fencing tokens to a fenced register
// (fence.Memory); every operation is recorded with its invoke and complete
// times. A recorder watches each cluster's lock keys from the first
// revision, and compaction never passes what it has seen, so the etcd
// history is complete even while the nemesis compacts every 200 ms.
//
// The nemesis injects one fault at a time and heals it: SIGKILL and restart
// of a leader or a follower, SIGSTOP of a leader past the election timeout,
// a blackholed member, delayed or dropping links, a lock holder (a child
// process) paused past its TTL and then resumed, a gateway SIGKILLed while
// clients wait, compaction storms, the loss of two members of one cluster,
// resharding, and a release whose reply is lost and retried.
//
// The checkers (check*.go) then verify: the fenced register is
// linearizable under the model "a write is legal only with a token at least
// the highest accepted" (porcupine, per name); fencing tokens grow per name
// and every grant is backed by its key in etcd; no grant happened while a
// key ahead of it still existed (in etcd's history, bounded in real time by
// sampled linearizable reads); no two SDK holders believed they held one
// name at once; FIFO among waiters that stayed; no waiter outlived its wait
// timeout by more than a second; no keys or leases are left after
// quiescence; and how long each fault kept the affected names from being
// granted.
//
// The harness needs Linux (process groups, Pdeathsig); elsewhere the
// package is empty. `go test ./loadtest/chaos/...` runs the quick mode; LEASEGATE_CHAOS=long
// (or -chaos.long) runs the long mode and prints the report. Every run
// writes its histories to an output directory (LEASEGATE_CHAOS_OUT, the
// test's artifact directory with -artifacts, or a temporary directory that
// is kept when a check fails).
package chaos
