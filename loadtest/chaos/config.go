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
	// Seed seeds the nemesis's choices; 0 picks one from the clock.
	Seed uint64
	// Report prints the long-mode report.
	Report bool
}

// QuickConfig is the CI run: a few dozen injections in about two minutes.
func QuickConfig() Config {
	return Config{Injections: 20, Workers: 8, NamesPerCluster: 3, TTL: 2 * time.Second,
		TickMs: 100, ElectionMs: 1000, Gap: 500 * time.Millisecond}
}

// LongConfig is the long run behind the report: at least 200 injections.
func LongConfig() Config {
	c := QuickConfig()
	c.Injections = 220
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
	}
	return nil
}
