// Package buildinfo says which build of leasegate is running: the version
// the release build stamped in, or else the module version and the VCS
// revision the Go toolchain recorded. Both binaries print it for --version
// and the gateway exports it as leasegate_build_info, so the two always
// agree.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Stamped by the release build (.ci/build, from the Dockerfile's VERSION and
// REVISION build arguments):
//
//	-ldflags "-X github.com/leasegate/leasegate/internal/buildinfo.version=v1.4.0
//	          -X github.com/leasegate/leasegate/internal/buildinfo.revision=0123abc"
//
// The image's build context has no .git, so the toolchain cannot record the
// revision there itself; a build in a checkout needs neither.
var (
	version  string
	revision string
)

// Devel is the version of a build that knows none: `go build` or `go run`
// in a checkout, without a stamped version.
const Devel = "devel"

// Info describes one build.
type Info struct {
	// Version is the stamped version, else the main module's version
	// (v1.4.0 after `go install …@v1.4.0`, a pseudo-version with Go 1.24+
	// in a checkout), else Devel.
	Version string
	// Revision is the VCS commit, "" when unknown.
	Revision string
	// Modified reports uncommitted changes in the checkout it was built
	// from (vcs.modified); false when unknown.
	Modified bool
	// Time is the commit time as the toolchain records it (RFC 3339), ""
	// when unknown.
	Time string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Read returns the running binary's build information.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi, version, revision)
}

// fromBuildInfo merges what the toolchain recorded (bi, nil when it
// recorded nothing) with the stamped values, which win.
func fromBuildInfo(bi *debug.BuildInfo, stampedVersion, stampedRevision string) Info {
	info := Info{Version: Devel, GoVersion: runtime.Version()}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		}
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			case "vcs.time":
				info.Time = s.Value
			}
		}
	}
	if stampedVersion != "" {
		info.Version = stampedVersion
	}
	if stampedRevision != "" {
		info.Revision = stampedRevision
	}
	return info
}

// String is the one-line form --version prints, for example
// "v1.4.0 (revision 0123abc, modified, 2026-11-30T12:00:00Z, go1.26.0)".
func (i Info) String() string {
	var details []string
	if i.Revision != "" {
		details = append(details, "revision "+i.Revision)
	}
	if i.Modified {
		details = append(details, "modified")
	}
	if i.Time != "" {
		details = append(details, i.Time)
	}
	details = append(details, i.GoVersion)
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(details, ", "))
}
