// Package scenario runs the load test's scenarios — uncontested cycles,
// open-loop arrivals, contended handoffs, renewal load and capacity — for
// leasegate and its baselines side by side, and returns their results.
package scenario

import (
	"fmt"
	"time"
)

// Config sizes every scenario. Every phase is bounded in time and in
// operations.
type Config struct {
	// Workers is the number of concurrent clients (C) in the uncontested
	// and open-loop scenarios. Default 64, the client count the
	// performance goals are stated for.
	Workers int
	// Duration is how long each system is measured in each phase, after
	// Warmup. Default 8 s.
	Duration time.Duration
	// Warmup runs before each measured phase and is not recorded.
	// Default Duration/8, at most 1 s.
	Warmup time.Duration
	// Rounds splits each system's Duration into this many slices, run
	// interleaved with the other systems' (A B C A B C …) so that a noisy
	// moment of the machine does not land on one system alone. Default 4.
	Rounds int
	// Settle is the pause between two measured phases, so that one
	// system's trailing work (lease revokes, closing sessions) does not land
	// in the next one's measurement. Default 300 ms.
	Settle time.Duration
	// IdleSample is how long the process's idle CPU is sampled before a
	// scenario's rounds, to subtract it from CPU per operation. Default
	// 500 ms.
	IdleSample time.Duration
	// MaxRequests caps the operations measured per system and phase.
	// Default 2,000,000.
	MaxRequests int64
	// Rate is the open-loop arrival rate per second. Default 400.
	Rate float64
	// Names and Waiters shape the contended scenario: Waiters clients per
	// name, over Names names. Default 8 names × 4 waiters.
	Names, Waiters int
	// Hold is how long a contended holder keeps the lock. Default 1 ms.
	Hold time.Duration
	// ReleaseDelay is, in the delayed handoff, the time from the waiter's
	// confirmed enqueue to the holder's release. Default 5 ms.
	ReleaseDelay time.Duration
	// DrainWaiters is the queue drained in the drain measurement. Default
	// 300.
	DrainWaiters int
	// MemWaiters is the number of queued waiters the gateway's memory per
	// waiter is measured over. Default 300.
	MemWaiters int
	// RenewLocks (K) and RenewClients size the renewal scenario. Default
	// 2,000 locks over 8 clients.
	RenewLocks, RenewClients int
	// RenewTTL is the lease TTL in the renewal scenario. Default 10 s.
	RenewTTL time.Duration
	// RenewWindow is how long the held locks are watched renewing. Zero
	// means Duration, but at least two renew intervals (2×RenewTTL/3) and
	// a second.
	RenewWindow time.Duration
	// SessionTTL is the TTL of sessions in cycle scenarios. Default 30 s.
	SessionTTL time.Duration
	// LockTTL is the TTL of per-lock leases and Redis locks. Default 10 s.
	LockTTL time.Duration
	// CapacityTarget is how many locks the capacity scenario tries to hold.
	// Default 1,000,000.
	CapacityTarget int64
	// CapacityDuration bounds the capacity scenario's fill. Default 3 min.
	CapacityDuration time.Duration
	// CapacityWorkers and CapacitySessions shape the fill. Default 128
	// concurrent acquires over 16 sessions.
	CapacityWorkers, CapacitySessions int
	// MaxRSS stops the capacity fill when the process's resident memory
	// passes it. Default 12 GiB.
	MaxRSS int64
}

// Default returns the defaults of a full run (about four minutes plus the
// capacity fill).
func Default() Config {
	return Config{
		Workers:          64,
		Duration:         8 * time.Second,
		Warmup:           time.Second,
		Rounds:           4,
		Settle:           300 * time.Millisecond,
		IdleSample:       500 * time.Millisecond,
		MaxRequests:      2_000_000,
		Rate:             400,
		Names:            8,
		Waiters:          4,
		Hold:             time.Millisecond,
		ReleaseDelay:     5 * time.Millisecond,
		DrainWaiters:     300,
		MemWaiters:       300,
		RenewLocks:       2000,
		RenewClients:     8,
		RenewTTL:         10 * time.Second,
		SessionTTL:       30 * time.Second,
		LockTTL:          10 * time.Second,
		CapacityTarget:   1_000_000,
		CapacityDuration: 3 * time.Minute,
		CapacityWorkers:  128,
		CapacitySessions: 16,
		MaxRSS:           12 << 30,
	}
}

// Quick returns a configuration for a run of well under a minute.
func Quick() Config {
	c := Default()
	c.Workers = 16
	c.Duration = 2 * time.Second
	c.Warmup = 250 * time.Millisecond
	c.Rounds = 2
	c.Rate = 200
	c.Names, c.Waiters = 4, 3
	c.DrainWaiters, c.MemWaiters = 100, 100
	c.RenewLocks, c.RenewClients = 300, 4
	c.RenewTTL = 3 * time.Second
	c.CapacityTarget = 20_000
	c.CapacityDuration = 15 * time.Second
	c.CapacityWorkers, c.CapacitySessions = 64, 4
	return c
}

// Validate names the first value out of range.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1 || c.Workers > 4096:
		return fmt.Errorf("workers %d is outside 1 to 4096", c.Workers)
	case c.Duration <= 0 || c.Duration > 30*time.Minute:
		return fmt.Errorf("duration %s is outside (0, 30m]", c.Duration)
	case c.Warmup < 0 || c.Warmup > c.Duration:
		return fmt.Errorf("warmup %s is outside [0, duration %s]", c.Warmup, c.Duration)
	case c.Rounds < 1 || c.Rounds > 100:
		return fmt.Errorf("rounds %d is outside 1 to 100", c.Rounds)
	case c.Settle < 0 || c.Settle > time.Minute || c.IdleSample < 0 || c.IdleSample > time.Minute:
		return fmt.Errorf("settle %s / idle sample %s: want each within [0, 1m]", c.Settle, c.IdleSample)
	case c.RenewWindow < 0:
		return fmt.Errorf("renew window %s is negative", c.RenewWindow)
	case c.MaxRequests < 1:
		return fmt.Errorf("max requests %d must be at least 1", c.MaxRequests)
	case c.Rate <= 0 || c.Rate > 100_000:
		return fmt.Errorf("rate %g/s is outside (0, 100000]", c.Rate)
	case c.Names < 1 || c.Waiters < 2 || c.Names*c.Waiters > 4096:
		return fmt.Errorf("contended %d names × %d waiters: want at least 1 name, 2 waiters and at most 4096 clients", c.Names, c.Waiters)
	case c.Hold < 0 || c.Hold > time.Second:
		return fmt.Errorf("hold %s is outside [0, 1s]", c.Hold)
	case c.ReleaseDelay < 0 || c.ReleaseDelay > time.Second:
		return fmt.Errorf("release delay %s is outside [0, 1s]", c.ReleaseDelay)
	case c.DrainWaiters < 1 || c.DrainWaiters > 900 || c.MemWaiters < 1 || c.MemWaiters > 900:
		return fmt.Errorf("drain waiters %d / memory waiters %d: want each within 1 to 900 (the gateway's per-address connection cap is 1000)", c.DrainWaiters, c.MemWaiters)
	case c.RenewLocks < 1 || c.RenewClients < 1 || c.RenewClients > c.RenewLocks:
		return fmt.Errorf("renewal %d locks over %d clients: want 1 ≤ clients ≤ locks", c.RenewLocks, c.RenewClients)
	case c.RenewTTL < 2*time.Second:
		return fmt.Errorf("renew TTL %s is below etcd's minimum of about 2s", c.RenewTTL)
	case c.SessionTTL < 2*time.Second || c.LockTTL < 2*time.Second:
		return fmt.Errorf("session TTL %s / lock TTL %s: want at least 2s", c.SessionTTL, c.LockTTL)
	case c.CapacityTarget < 1 || c.CapacityDuration <= 0:
		return fmt.Errorf("capacity target %d in %s: want a positive count and duration", c.CapacityTarget, c.CapacityDuration)
	case c.CapacityWorkers < 1 || c.CapacitySessions < 1:
		return fmt.Errorf("capacity workers %d / sessions %d: want at least 1", c.CapacityWorkers, c.CapacitySessions)
	case c.MaxRSS < 256<<20:
		return fmt.Errorf("max RSS %d bytes is below 256 MiB", c.MaxRSS)
	}
	return nil
}
