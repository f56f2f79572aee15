package scenario

import (
	"github.com/leasegate/leasegate/loadtest/internal/stats"
)

// Run is one system measured in one phase.
type Run struct {
	System   string `json:"system"`
	Describe string `json:"describe"`
	Workers  int    `json:"workers"`
	// Seconds is the measured window, after warmup.
	Seconds float64 `json:"seconds"`
	// Ops counts operations completed in the window; Errors those that
	// failed.
	Ops         int64    `json:"ops"`
	Errors      int64    `json:"errors"`
	ErrorSample []string `json:"error_sample,omitempty"`
	// PerSec is Ops / Seconds.
	PerSec   float64           `json:"per_s"`
	Latency  stats.Summary     `json:"latency"`
	Spectrum []stats.Point     `json:"spectrum,omitempty"`
	Timeline []stats.RatePoint `json:"timeline,omitempty"`
	// CPUPerOpUs is the CPU time spent per operation in this process (the
	// load generator, the gateway and the embedded etcd members together)
	// plus, for Redis, the redis-server's. It includes the process's
	// background (etcd's ticks, idle sessions' keepalives), which dominates
	// at low operation rates; see the idle CPU notes.
	CPUPerOpUs *float64 `json:"cpu_us_per_op,omitempty"`
	// EtcdCPUPerOpUs is the CPU time (user + system) the etcd process spent
	// per operation, background included, where etcd runs in a process of
	// its own (the pinned setup); nil elsewhere.
	EtcdCPUPerOpUs *float64 `json:"etcd_cpu_us_per_op,omitempty"`
	// EtcdWritesPerOp is the raft entries etcd agreed on per operation, over
	// every cluster (background included: lease revokes of closing
	// sessions, expiring leases); KeepalivesPerOp the lease renewals etcd
	// counted per operation. Nil when etcd's counts cannot be read.
	EtcdWritesPerOp *float64 `json:"etcd_writes_per_op,omitempty"`
	KeepalivesPerOp *float64 `json:"keepalives_per_op,omitempty"`
}

// Uncontested is acquire+release cycles on names no one else takes.
type Uncontested struct {
	// Serial is one client at a time: the latency of a cycle.
	Serial []Run `json:"serial"`
	// Concurrent is Workers clients, each on its own name.
	Concurrent []Run    `json:"concurrent"`
	Notes      []string `json:"notes,omitempty"`
}

// OpenRun is one system under a fixed arrival rate.
type OpenRun struct {
	Run
	// Rate is the intended arrival rate.
	Rate float64 `json:"rate"`
	// Service is the latency from the actual start of each cycle; Latency
	// (in Run) counts from its intended start and so includes any wait for a
	// free client.
	Service stats.Summary `json:"service"`
	// Delayed counts cycles that started more than 1 ms after their
	// intended start (every client was busy).
	Delayed int64 `json:"delayed"`
	// Unfinished counts arrivals not done when the drain period ended; they
	// are recorded with the latency they had reached.
	Unfinished int64 `json:"unfinished"`
}

// OpenLoop is cycles arriving at a fixed rate, whatever the latency.
type OpenLoop struct {
	Runs  []OpenRun `json:"runs"`
	Notes []string  `json:"notes,omitempty"`
}

// ContendedRun is one system with several clients per name.
type ContendedRun struct {
	// Run's Latency is each acquire's wait; Ops counts grants.
	Run
	// Handoff is release → next holder granted, for grants to clients
	// that were already asking before the previous holder was granted.
	Handoff         stats.Summary `json:"handoff"`
	HandoffSpectrum []stats.Point `json:"handoff_spectrum,omitempty"`
	HandoffBins     []stats.Bin   `json:"handoff_bins,omitempty"`
	// FIFOViolations counts grants that went to a client while another
	// client, whose place in line was confirmed before this one even asked,
	// was still waiting. FIFOChecked counts grants made while someone else
	// waited.
	FIFOViolations int64 `json:"fifo_violations"`
	FIFOChecked    int64 `json:"fifo_checked"`
	// Overlaps counts grants made while the client side still saw another
	// holder: a mutual-exclusion failure (expected 0 everywhere).
	Overlaps int64 `json:"overlaps"`
	// Fairness is Jain's index over grants per client (1 = equal shares);
	// MinGrants and MaxGrants are the extremes.
	Fairness  float64 `json:"fairness"`
	MinGrants int64   `json:"min_grants"`
	MaxGrants int64   `json:"max_grants"`
}

// Contended is Waiters clients per name over Names names.
type Contended struct {
	Names   int            `json:"names"`
	Waiters int            `json:"waiters_per_name"`
	HoldMs  float64        `json:"hold_ms"`
	Runs    []ContendedRun `json:"runs"`
	Notes   []string       `json:"notes,omitempty"`
	// Delayed, Drain and WaiterMemory are the contended measurements
	// beyond the closed loop of holders and waiters.
	Delayed      *DelayedHandoff `json:"delayed_handoff,omitempty"`
	Drain        *Drain          `json:"drain,omitempty"`
	WaiterMemory *WaiterMemory   `json:"waiter_memory,omitempty"`
}

// RenewalRun is K locks held by one mode for a window.
type RenewalRun struct {
	Mode    string  `json:"mode"`
	Clients int     `json:"clients"`
	Locks   int     `json:"locks"`
	TTLs    float64 `json:"ttl_s"`
	// AcquireSeconds is how long taking the locks took.
	AcquireSeconds float64 `json:"acquire_s"`
	WindowSeconds  float64 `json:"window_s"`
	// Keepalives is the lease renewals etcd saw in the window.
	Keepalives       float64 `json:"keepalives"`
	KeepalivesPerSec float64 `json:"keepalives_per_s"`
	// PerLock is KeepalivesPerSec / Locks; Bound is Clients / Locks.
	PerLock float64 `json:"keepalives_per_s_per_lock"`
	Bound   float64 `json:"clients_per_lock"`
	// CPUPerSec is process CPU seconds per second in the window.
	CPUPerSec float64 `json:"cpu_s_per_s"`
	// WritesPerSec is the raft entries per second etcd agreed on in the
	// window, over every cluster.
	WritesPerSec float64 `json:"etcd_writes_per_s"`
	// Lost counts locks lost during the window (expected 0).
	Lost   int    `json:"lost"`
	Errors int64  `json:"errors"`
	Note   string `json:"note,omitempty"`
}

// Renewal is held locks renewing, per mode.
type Renewal struct {
	// Scope says which clusters' renewals were counted.
	Scope string       `json:"scope"`
	Runs  []RenewalRun `json:"runs"`
	Notes []string     `json:"notes,omitempty"`
}

// CapacitySample is one moment of the capacity fill.
type CapacitySample struct {
	Seconds  float64 `json:"t_s"`
	Held     int64   `json:"held"`
	RSSBytes int64   `json:"rss_bytes"`
	HeapB    int64   `json:"heap_bytes"`
}

// Capacity is as many session locks as fit, held at once.
type Capacity struct {
	Target   int64   `json:"target"`
	Held     int64   `json:"held"`
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"per_s"`
	Sessions int     `json:"sessions"`
	Workers  int     `json:"workers"`
	// StopReason says why the fill ended.
	StopReason  string   `json:"stop_reason"`
	Errors      int64    `json:"errors"`
	ErrorSample []string `json:"error_sample,omitempty"`
	// Memory per held lock: the process's heap in use (after GC) and its
	// resident set, both covering the gateway and the embedded etcd
	// members (the load generator keeps nothing per lock), and the etcd
	// backend database files.
	HeapPerLock   float64          `json:"heap_bytes_per_lock"`
	RSSPerLock    float64          `json:"rss_bytes_per_lock"`
	EtcdDBPerLock float64          `json:"etcd_db_bytes_per_lock"`
	RSSBytes      int64            `json:"rss_bytes"`
	EtcdDBBytes   int64            `json:"etcd_db_bytes"`
	Samples       []CapacitySample `json:"samples"`
	Latency       stats.Summary    `json:"latency"`
	Notes         []string         `json:"notes,omitempty"`
}

// Pinned is uncontested cycles at saturation with etcd in a process of its
// own on CPUs of its own, and the gateway and the load generator on the
// others.
type Pinned struct {
	// EtcdCPUs and GatewayCPUs are the CPU lists asked for; the
	// ThreadCPUs fields are the lists the kernel reported, at the end of
	// the run, for the threads of the etcd process and of this one (one
	// entry per distinct list: one entry when every thread obeys).
	EtcdCPUs          string   `json:"etcd_cpus"`
	GatewayCPUs       string   `json:"gateway_cpus"`
	EtcdThreadCPUs    []string `json:"etcd_thread_cpus"`
	GatewayThreadCPUs []string `json:"gateway_thread_cpus"`
	// EtcdListens are the TCP addresses the etcd process listened on, read
	// from the kernel's socket tables.
	EtcdListens []string `json:"etcd_listens"`
	// Runs are the systems measured, Workers clients each. CPUPerOpUs is
	// this process's (gateway and load generator), EtcdCPUPerOpUs the etcd
	// process's, EtcdWritesPerOp the raft entries the member applied.
	Runs  []Run    `json:"runs"`
	Notes []string `json:"notes,omitempty"`
}
