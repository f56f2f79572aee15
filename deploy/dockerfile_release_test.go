package deploy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDockerfileReleaseMatchesImage: Dockerfile.release, the image
// goreleaser builds from the release binaries, has no build stage of its
// own (it copies the goreleaser-built leasegate and leasectl from the build
// context) and otherwise the runtime stage of ./Dockerfile: the same base,
// user, environment, volume, port and entry point. .goreleaser.yaml's
// dockers_v2 section names it, for both binaries.
func TestDockerfileReleaseMatchesImage(t *testing.T) {
	release := readDockerfileAt(t, "Dockerfile.release")
	var froms []string
	for _, in := range release {
		if in.cmd == "FROM" {
			froms = append(froms, in.args)
		}
		if in.cmd == "RUN" {
			t.Errorf("Dockerfile.release: RUN %q: the release image builds nothing (and distroless has no shell)", in.args)
		}
	}
	if len(froms) != 1 {
		t.Fatalf("Dockerfile.release: FROM %q, want one stage", froms)
	}
	if !slices.ContainsFunc(release, func(in dockerInstr) bool {
		return in.cmd == "COPY" && !strings.Contains(in.args, "--from") &&
			strings.Contains(in.args, "$TARGETPLATFORM/leasegate") && strings.Contains(in.args, "$TARGETPLATFORM/leasectl") &&
			strings.HasSuffix(in.args, " /usr/local/bin/")
	}) {
		t.Error("Dockerfile.release: no COPY of $TARGETPLATFORM/leasegate and $TARGETPLATFORM/leasectl (goreleaser's build context) into /usr/local/bin/")
	}

	// ./Dockerfile's runtime stage: everything after its last FROM.
	image := readDockerfile(t)
	last := 0
	for i, in := range image {
		if in.cmd == "FROM" {
			last = i
		}
	}
	if got, want := froms[0], image[last].args; got != want {
		t.Errorf("Dockerfile.release: FROM %q; ./Dockerfile's runtime stage is FROM %q", got, want)
	}
	for _, cmd := range []string{"USER", "WORKDIR", "ENV", "VOLUME", "EXPOSE", "ENTRYPOINT"} {
		if got, want := instrArgs(release, cmd), instrArgs(image[last:], cmd); !slices.Equal(got, want) {
			t.Errorf("Dockerfile.release: %s %q; ./Dockerfile's runtime stage has %q", cmd, got, want)
		}
	}
	if !slices.ContainsFunc(release, func(in dockerInstr) bool {
		return in.cmd == "COPY" && strings.Contains(in.args, "--chown=65532:65532") && strings.HasSuffix(in.args, " /data/leasegate")
	}) {
		t.Error("Dockerfile.release: /data/leasegate is not created owned by nonroot (65532)")
	}

	cfg, err := os.ReadFile(filepath.Join(repoRoot, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dockerfile: Dockerfile.release", "ids: [leasegate, leasectl]"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf(".goreleaser.yaml does not say %q", want)
		}
	}
}

// instrArgs returns the arguments of every instruction cmd, in order.
func instrArgs(ins []dockerInstr, cmd string) []string {
	var out []string
	for _, in := range ins {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}
