package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/scenario"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--quick", "--workers", "8", "--scenario", "contended,uncontested"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	q := scenario.Quick()
	if o.cfg.Workers != 8 || o.cfg.Duration != q.Duration || o.cfg.RenewLocks != q.RenewLocks {
		t.Errorf("--quick --workers 8 gave workers %d, duration %s, locks %d; want 8, %s, %d",
			o.cfg.Workers, o.cfg.Duration, o.cfg.RenewLocks, q.Duration, q.RenewLocks)
	}
	if want := []string{"uncontested", "contended"}; !slices.Equal(o.scenarios, want) {
		t.Errorf("scenarios = %v; want %v (run order)", o.scenarios, want)
	}
	o, err = parseFlags([]string{"--quick", "--drain-waiters", "50", "--mem-waiters", "40", "--release-delay", "3ms", "--cpuprofile", "/tmp/p"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.DrainWaiters != 50 || o.cfg.MemWaiters != 40 || o.cfg.ReleaseDelay != 3*time.Millisecond || o.cpuProfile != "/tmp/p" {
		t.Errorf("--drain-waiters 50 --mem-waiters 40 --release-delay 3ms --cpuprofile /tmp/p gave %d, %d, %s, %q",
			o.cfg.DrainWaiters, o.cfg.MemWaiters, o.cfg.ReleaseDelay, o.cpuProfile)
	}
	o, err = parseFlags([]string{"--quick", "--duration", "4s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Duration != 4*time.Second || o.cfg.Warmup != 500*time.Millisecond {
		t.Errorf("--quick --duration 4s gave duration %s, warmup %s; want 4s, 500ms", o.cfg.Duration, o.cfg.Warmup)
	}
}

func TestParseFlagsPinned(t *testing.T) {
	o, err := parseFlags([]string{"--scenario", "pinned", "--etcd-cpus", "0,2-3", "--gateway-cpus", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.scenarios, []string{pinnedScenario}) || o.pin == nil ||
		o.pin.EtcdCPUs.String() != "0,2-3" || o.pin.GatewayCPUs.String() != "1" {
		t.Errorf("--scenario pinned --etcd-cpus 0,2-3 --gateway-cpus 1 gave scenarios %v, pin %+v; want [pinned], etcd 0,2-3, gateway 1", o.scenarios, o.pin)
	}
	o, err = parseFlags([]string{"--scenario", "pinned"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.pin == nil || o.pin.EtcdCPUs.String() != "0" || o.pin.GatewayCPUs != nil {
		t.Errorf("--scenario pinned gave pin %+v; want etcd on 0, the gateway on the rest (nil)", o.pin)
	}
	if o, err = parseFlags(nil, io.Discard); err != nil || o.pin != nil || slices.Contains(o.scenarios, pinnedScenario) {
		t.Errorf("no flags gave scenarios %v, pin %+v, %v; want all but pinned, no pin", o.scenarios, o.pin, err)
	}
}

func TestParseFlagsKeepsUnflaggedDefaults(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := scenario.Default(); o.cfg != d {
		t.Errorf("parseFlags(nil).cfg = %+v; want the defaults %+v", o.cfg, d)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "everything"}, `scenario "everything"`},
		{[]string{"--workers", "0"}, "workers 0"},
		{[]string{"--waiters", "1"}, "1 waiters"},
		{[]string{"--renew-ttl", "1s"}, "renew TTL 1s"},
		{[]string{"--drain-waiters", "0"}, "drain waiters 0"},
		{[]string{"--release-delay", "2s"}, "release delay 2s"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--scenario", "pinned,uncontested"}, "give it alone"},
		{[]string{"--scenario", "uncontested", "--etcd-cpus", "1"}, "--etcd-cpus: only the pinned scenario"},
		{[]string{"--gateway-cpus", "1"}, "--gateway-cpus: only the pinned scenario"},
		{[]string{"--scenario", "pinned", "--etcd-cpus", "a"}, `--etcd-cpus: CPU list "a"`},
		{[]string{"--scenario", "pinned", "--gateway-cpus", "2-1"}, `--gateway-cpus: CPU list "2-1"`},
		{[]string{"--scenario", "pinned", "--endpoint", "http://127.0.0.1:7070"}, "give no --endpoint"},
	} {
		_, err := parseFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseFlags(%q) = %v; want an error containing %q", c.args, err, c.want)
		}
	}
}

func TestRefusesNonLoopbackEndpoint(t *testing.T) {
	o, err := parseFlags([]string{"--endpoint", "http://10.1.2.3:7070", "--scenario", "uncontested"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.out = t.TempDir()
	if _, err := run(t.Context(), o, io.Discard); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("run against 10.1.2.3 = %v; want a refusal naming loopback", err)
	}
}
