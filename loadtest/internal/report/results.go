// Package report turns a load test's results into the files it leaves: a
// JSON document with every figure, a Markdown report with tables and the
// headline ratios against their goals, and SVG charts.
package report

import (
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/layers"
	"github.com/leasegate/leasegate/loadtest/internal/scenario"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
)

// Results is everything one run measured.
type Results struct {
	Started  time.Time       `json:"started"`
	Finished time.Time       `json:"finished"`
	Command  string          `json:"command"`
	Setup    string          `json:"setup"`
	Machine  testbed.Machine `json:"machine"`
	Config   Settings        `json:"config"`
	Notes    []string        `json:"notes,omitempty"`

	Uncontested *scenario.Uncontested `json:"uncontested,omitempty"`
	OpenLoop    *scenario.OpenLoop    `json:"open_loop,omitempty"`
	Contended   *scenario.Contended   `json:"contended,omitempty"`
	Renewal     *scenario.Renewal     `json:"renewal,omitempty"`
	Mixed       *scenario.Mixed       `json:"mixed,omitempty"`
	Capacity    *scenario.Capacity    `json:"capacity,omitempty"`
	Pinned      *scenario.Pinned      `json:"pinned,omitempty"`

	// Ratios are the headline figures, each with its goal.
	Ratios []Ratio `json:"ratios"`
	// PinnedRatios are the pinned scenario's systems ÷ concurrency.Mutex.
	PinnedRatios []PinnedRatio `json:"pinned_ratios,omitempty"`
	// Figures are the ratios the performance work is judged by (Figures).
	Figures []Figure `json:"figures"`
	// Layers is CPU per operation by layer, per profiled phase (with
	// --cpuprofile); ProfileFiles are the merged profiles behind it.
	Layers       []layers.Row `json:"layers,omitempty"`
	ProfileFiles []string     `json:"profile_files,omitempty"`
}

// Settings echoes the configuration in readable units.
type Settings struct {
	Scenarios        []string `json:"scenarios"`
	Workers          int      `json:"workers"`
	Duration         string   `json:"duration"`
	Warmup           string   `json:"warmup"`
	MaxRequests      int64    `json:"max_requests"`
	Rate             float64  `json:"rate"`
	Names            int      `json:"names"`
	Waiters          int      `json:"waiters"`
	Hold             string   `json:"hold"`
	ReleaseDelay     string   `json:"release_delay"`
	DrainWaiters     int      `json:"drain_waiters"`
	MemWaiters       int      `json:"mem_waiters"`
	RenewLocks       int      `json:"renew_locks"`
	RenewClients     int      `json:"renew_clients"`
	RenewTTL         string   `json:"renew_ttl"`
	SessionTTL       string   `json:"session_ttl"`
	LockTTL          string   `json:"lock_ttl"`
	CapacityTarget   int64    `json:"capacity_target"`
	CapacityDuration string   `json:"capacity_duration"`
	CapacityWorkers  int      `json:"capacity_workers"`
	CapacitySessions int      `json:"capacity_sessions"`
	MaxRSSMiB        int64    `json:"max_rss_mib"`
}

// SettingsOf echoes c.
func SettingsOf(scenarios []string, c scenario.Config) Settings {
	return Settings{
		Scenarios: scenarios, Workers: c.Workers, Duration: c.Duration.String(), Warmup: c.Warmup.String(),
		MaxRequests: c.MaxRequests, Rate: c.Rate, Names: c.Names, Waiters: c.Waiters, Hold: c.Hold.String(),
		ReleaseDelay: c.ReleaseDelay.String(), DrainWaiters: c.DrainWaiters, MemWaiters: c.MemWaiters,
		RenewLocks: c.RenewLocks, RenewClients: c.RenewClients, RenewTTL: c.RenewTTL.String(),
		SessionTTL: c.SessionTTL.String(), LockTTL: c.LockTTL.String(),
		CapacityTarget: c.CapacityTarget, CapacityDuration: c.CapacityDuration.String(),
		CapacityWorkers: c.CapacityWorkers, CapacitySessions: c.CapacitySessions, MaxRSSMiB: c.MaxRSS >> 20,
	}
}
