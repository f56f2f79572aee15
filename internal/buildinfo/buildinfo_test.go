package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/leasegate/leasegate", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"},
			{Key: "vcs.modified", Value: "true"},
			{Key: "vcs.time", Value: "2026-11-30T12:00:00Z"},
		},
	}
	devel := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}
	tests := []struct {
		name         string
		bi           *debug.BuildInfo
		version, rev string
		want         Info
		wantString   string
	}{
		{"toolchain only", vcs, "", "",
			Info{Version: "v1.2.3", Revision: "abc123", Modified: true, Time: "2026-11-30T12:00:00Z", GoVersion: "go1.26.0"},
			"v1.2.3 (revision abc123, modified, 2026-11-30T12:00:00Z, go1.26.0)"},
		{"stamped wins", vcs, "v2.0.0", "def456",
			Info{Version: "v2.0.0", Revision: "def456", Modified: true, Time: "2026-11-30T12:00:00Z", GoVersion: "go1.26.0"},
			"v2.0.0 (revision def456, modified, 2026-11-30T12:00:00Z, go1.26.0)"},
		{"source build", devel, "", "",
			Info{Version: Devel, GoVersion: "go1.26.0"},
			"devel (go1.26.0)"},
		{"stamped, no vcs", devel, "v1.0.0", "",
			Info{Version: "v1.0.0", GoVersion: "go1.26.0"},
			"v1.0.0 (go1.26.0)"},
	}
	for _, tt := range tests {
		got := fromBuildInfo(tt.bi, tt.version, tt.rev)
		if got != tt.want {
			t.Errorf("%s: fromBuildInfo(…, %q, %q) = %+v; want %+v", tt.name, tt.version, tt.rev, got, tt.want)
		}
		if s := got.String(); s != tt.wantString {
			t.Errorf("%s: String() = %q; want %q", tt.name, s, tt.wantString)
		}
	}
	if got := fromBuildInfo(nil, "", ""); got.Version != Devel || got.GoVersion == "" {
		t.Errorf("fromBuildInfo(nil) = %+v; want version %q and the running Go version", got, Devel)
	}
}
