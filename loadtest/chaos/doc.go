// Package chaos is leasegate's Jepsen-style safety harness: real etcd member
// processes, real gateway processes, SDK clients, clients that lie, a fault
// injector (the nemesis) and checkers over the recorded history and the
// etcd revision history.
//
// A run starts two etcd clusters of three member processes each (the
// harness's etcdmember command, loadtest/chaos/etcdmember), two gateway
// processes (`leasegate --etcd … --attempt-ttl 2s`) that reach every
// member through a fault proxy (internal/netfault), and client workers
// that reach the gateways through fault proxies too. Workers take locks with the Go SDK and write
// their fencing tokens to a fenced register (fence.Memory); campaigners
// (elections.go) do the same as leaders of two elections, whose terms every
// checker below judges as the locks they are; semaphore workers
// (semaphores.go) take three names as semaphores of limit 2 or 3, per lock
// and in sessions, and the same checkers judge them at their limit N
// (recorded with every acquire; a lock's is 1); Python workers (python.go,
// pyworker.py) are processes that take the contended names through the
// Python SDK (sdk/python) over both gateways, check the lock's loss
// signal and deadline before each write to the register (over its HTTP
// endpoint, which records the write) and release, and report each acquire
// as JSON lines stamped with CLOCK_MONOTONIC readings, which the harness
// records as a Go worker's (one in quick mode, two in long mode; skipped,
// with a logged line, when python3 is not on PATH); re-entrant workers
// (reentrant.go) take the contended names in sessions with
// client.WithReentrant, re-enter them once or twice (each hold a lock id
// of its own, the lock's token), ask for some holds again with their
// request id as a client whose answer was lost does, and release the
// holds in a random order, some twice at the wire; every operation
// is recorded with its invoke and complete times. A recorder watches each
// cluster's lock keys from the first revision, and compaction never passes
// what it has seen, so the etcd history is complete even while the nemesis
// compacts every 200 ms.
//
// Beside the workers, for the whole run, adversaries (adversary.go) do what
// honest clients never do:
//
//   - tamper holds locks and renews and releases them with edited lock ids
//     (a bit flipped, a character replaced, cut short, lengthened) and
//     foreign fencing tokens, over Connect and REST, then proves its lock
//     still there with a genuine renewal;
//   - replay renews and releases with other clients' lock ids once etcd has
//     deleted their keys;
//   - session keeps a session alive itself and keeps alive, closes and
//     acquires with edited and closed session ids;
//   - thief acquires and try-acquires with the request ids of other
//     clients' acquires in flight, under its own client id;
//   - stable workers use one request id for every acquire and acquire again
//     the moment they release, one of them in a session;
//   - resume aborts its queued Acquire stream on one gateway and retries it
//     with the same request id on the other, driving the Connect API itself
//     and forming its beliefs (deadline from valid_for_ms) as the SDK does;
//   - abandon (adv_abandon.go) gives its session acquires up at random
//     moments, racing the wait, the grant and the grant's answer, and at
//     the end checks that no name it abandoned is held by its session.
//
// Each adversary call is recorded with what would be correct (refused with
// a given code, or a no-op) and what came back.
//
// The nemesis injects one fault at a time and heals it: SIGKILL and restart
// of a leader or a follower, SIGSTOP of a leader past the election timeout,
// a blackholed member, delayed or dropping links, a lock holder (a child
// process) paused past its TTL and then resumed, a gateway SIGKILLed while
// clients wait, compaction storms, the loss of two members of one cluster,
// resharding, a release whose reply is lost and retried, and (nemesis_adv.go)
// etcd's answers to one gateway delayed by 2–3 s while SDK holders renew
// through it and rivals wait on the other, a gateway stopped gracefully
// (SIGTERM) under session waiters whose clients never come back, streams
// aborted and resumed on the other gateway while the first one's link to
// etcd is slowed so that its cleanup lands late, `leasectl run` holders
// (leasectl.go) sent SIGHUP or SIGKILL while another waits, and
// (nemesis_evict.go) holders force-released by their fencing tokens as an
// operator does — holders of fresh names with rivals queued behind them,
// evicted before and after the SDK opens its hold watch, and the holders
// of the contended names as Describe finds them — each eviction recorded
// with its send and answer times.
//
// The checkers (check*.go) then verify: the fenced register is
// linearizable under the model "a write is legal only with a token at least
// the highest accepted" (porcupine, per name); fencing tokens grow per name
// and every grant is backed by its key in etcd; no grant happened while a
// key ahead of it still existed (for a semaphore of limit N: while N keys
// ahead of it still existed) (in etcd's history, bounded in real time by
// sampled linearizable reads); no two holders believed they held one name
// at once (no more than N; a semaphore's holders never share a token); no holder was told its lock was gone before its own deadline;
// no thief was granted the waiter it named, and no victim lost its wait to
// one; every adversary call was refused as the API documents or was a
// no-op; every re-entry was a hold of its own, a hold asked for again was
// the same hold, and a hold's release sent again after an answer released
// nothing (check_holds.go); every holder evicted by its token stopped
// believing within its bound of the eviction — 1.5 s once it had held
// past the SDK's hold watch delay, its renewal interval + 1 s before — and
// only then is its overlap with the next holder excused (check_evict.go); FIFO among waiters that stayed; no waiter outlived its wait
// timeout by more than a second; no keys or leases are left once the
// workload has stopped and every lease's lifetime has passed (the longest
// lock TTL a worker asked for — a pooled lease of its class lapses then —
// a gateway's idle attempt lease its AttemptTTL and one renewal tick; a
// lease left is reported with its TTL and the keys on it); no gateway
// exited without the harness asking it to (a crash is reported with its
// panic); and how long each fault kept the affected names from being
// granted, including how long a stopped gateway's session waiters kept
// their name (at most the attempt TTL).
//
// What a holder believed is judged on one clock. An SDK holder believes
// from its grant until its Lock.Context is done or it releases (a Python
// worker: until its lock's loss signal fires or it begins to release); a
// re-entrant worker from its first grant until it begins to release its
// last hold or one of its holds' Context ends otherwise; a raw
// client until its deadline passes, a gateway refuses its renewal, or it
// releases; a leasectl holder while its command or any process the command
// started is alive: the command writes its CLOCK_MONOTONIC start to a FIFO
// that it and its child hold open, and the harness reads end of file the
// moment the last of them has exited. CLOCK_MONOTONIC is the clock of Go's
// monotonic readings, so all intervals are compared without slack.
//
// A bug the harness found is reproduced in isolation by a regression test
// (regression*_test.go) and its recorded history kept in testdata/. While
// it is open (openBugs in check.go) the test is skipped and a violation
// put down to it is reported without failing the run; once fixed, such a
// violation is a regression and fails the run like any other.
//
// The harness needs Linux (process groups, Pdeathsig, FIFOs); elsewhere the
// package is empty. `go test ./loadtest/chaos/...` runs the quick mode; LEASEGATE_CHAOS=long
// (or -chaos.long) runs the long mode and prints the report; -chaos.bin
// runs other builds of leasegate and leasectl; the etcd
// members always run the etcdmember command built from this checkout.
// Every run writes its histories to an output directory
// (LEASEGATE_CHAOS_OUT, the test's artifact directory with -artifacts, or a
// temporary directory that is kept when a check fails).
package chaos
