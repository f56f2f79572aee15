//go:build linux

package chaos

import (
	"fmt"
	"time"
)

// Config sizes one run. Flags and environment map onto it in the test
// only.
type Config struct {
	// Injections is how many faults the nemesis injects. Quick default 20
	// (every kind once, then random ones), long default 220.
	Injections int
	// Workers is how many in-process SDK clients take locks. Default 8.
	Workers int
	// StableWorkers is how many more workers use one request id for every
	// acquire and acquire again the moment they release (every other one
	// in a session). Default 2.
	StableWorkers int
	// Campaigners is how many more SDK clients campaign in elections
	// (elections.go). Default 2.
	Campaigners int
	// SemaphoreWorkers is how many more SDK clients take the semaphores
	// (semaphores.go), every other one in a session. Default 8.
	SemaphoreWorkers int
	// ReentrantWorkers is how many more SDK clients take the contended
	// names re-entrant in sessions, re-enter them and release their holds
	// in a random order (reentrant.go). Default 2.
	ReentrantWorkers int
	// PythonWorkers is how many more workers, each a process of its own,
	// take the contended names through the Python SDK (python.go); none
	// run when python3 is not found. Default 1 in quick mode, 2 in long
	// mode.
	PythonWorkers int
	// AdversaryPause is the mean pause between two calls of an adversary
	// (adversary.go). Default 300 ms in quick mode, 100 ms in long mode.
	AdversaryPause time.Duration
	// NamesPerCluster is how many contended lock names each cluster owns
	// under the initial map. Default 3.
	NamesPerCluster int
	// TTL is the lease TTL of every lock. Default 2 s (etcd's minimum is
	// about 1.5 × ElectionMs).
	TTL time.Duration
	// TickMs and ElectionMs are the members' raft timings. Default 100 and
	// 1000 ms (etcd's defaults).
	TickMs, ElectionMs uint
	// Gap is the quiet time between two injections. Default 500 ms.
	Gap time.Duration
	// AttemptTTL is the gateways' --attempt-ttl: how long a session
	// waiter's key outlives its attempt. Default 2 s, so that a waiter
	// whose gateway stopped frees its name within the quiescence checks.
	AttemptTTL time.Duration
	// Seed seeds the nemesis's choices; 0 picks one from the clock.
	Seed uint64
	// Report prints the long-mode report.
	Report bool
}

// QuickConfig is the CI run: a few dozen injections in about two minutes.
func QuickConfig() Config {
	return Config{Injections: 20, Workers: 8, StableWorkers: 2, Campaigners: 2, SemaphoreWorkers: 8, ReentrantWorkers: 2, PythonWorkers: 1, AdversaryPause: 300 * time.Millisecond, NamesPerCluster: 3, TTL: 2 * time.Second,
		TickMs: 100, ElectionMs: 1000, Gap: 500 * time.Millisecond, AttemptTTL: 2 * time.Second}
}

// LongConfig is the long run behind the report: at least 200 injections.
func LongConfig() Config {
	c := QuickConfig()
	c.Injections = 220
	c.AdversaryPause = 100 * time.Millisecond
	c.PythonWorkers = 2
	c.Report = true
	return c
}

// Validate reports the first field outside its range.
func (c Config) Validate() error {
	switch {
	case c.Injections < 1 || c.Injections > 10000:
		return fmt.Errorf("chaos: Injections %d is outside 1 to 10000", c.Injections)
	case c.Workers < 1 || c.Workers > 64:
		return fmt.Errorf("chaos: Workers %d is outside 1 to 64", c.Workers)
	case c.StableWorkers < 0 || c.StableWorkers > 16:
		return fmt.Errorf("chaos: StableWorkers %d is outside 0 to 16", c.StableWorkers)
	case c.Campaigners < 0 || c.Campaigners > 16:
		return fmt.Errorf("chaos: Campaigners %d is outside 0 to 16", c.Campaigners)
	case c.SemaphoreWorkers < 0 || c.SemaphoreWorkers > 32:
		return fmt.Errorf("chaos: SemaphoreWorkers %d is outside 0 to 32", c.SemaphoreWorkers)
	case c.ReentrantWorkers < 0 || c.ReentrantWorkers > 16:
		return fmt.Errorf("chaos: ReentrantWorkers %d is outside 0 to 16", c.ReentrantWorkers)
	case c.PythonWorkers < 0 || c.PythonWorkers > 8:
		return fmt.Errorf("chaos: PythonWorkers %d is outside 0 to 8", c.PythonWorkers)
	case c.AdversaryPause < 10*time.Millisecond || c.AdversaryPause > 10*time.Second:
		return fmt.Errorf("chaos: AdversaryPause %s is outside 10ms to 10s", c.AdversaryPause)
	case c.NamesPerCluster < 1 || c.NamesPerCluster > 32:
		return fmt.Errorf("chaos: NamesPerCluster %d is outside 1 to 32", c.NamesPerCluster)
	case c.TTL < time.Second || c.TTL%time.Second != 0:
		return fmt.Errorf("chaos: TTL %s must be whole seconds, at least 1s", c.TTL)
	case c.TickMs == 0 || c.ElectionMs < 5*c.TickMs:
		return fmt.Errorf("chaos: ElectionMs %d must be at least 5 × TickMs %d", c.ElectionMs, c.TickMs)
	case time.Duration(c.ElectionMs)*time.Millisecond*3/2 > c.TTL:
		return fmt.Errorf("chaos: TTL %s is below etcd's minimum, 1.5 × ElectionMs (%d ms)", c.TTL, c.ElectionMs)
	case c.Gap < 0:
		return fmt.Errorf("chaos: Gap %s is negative", c.Gap)
	case c.AttemptTTL < 2*time.Second || c.AttemptTTL > time.Minute || c.AttemptTTL%time.Second != 0:
		return fmt.Errorf("chaos: AttemptTTL %s is outside 2s to 1m in whole seconds", c.AttemptTTL)
	}
	return nil
}
