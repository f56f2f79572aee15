package deploy_test

import (
	"debug/elf"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dockerInstr is one Dockerfile instruction, continuation lines joined.
type dockerInstr struct {
	cmd, args string
}

func readDockerfile(t *testing.T) []dockerInstr {
	t.Helper()
	return readDockerfileAt(t, "Dockerfile")
}

// readDockerfileAt reads the Dockerfile at name, relative to the repository root.
func readDockerfileAt(t *testing.T, name string) []dockerInstr {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	var out []dockerInstr
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstr{cmd: strings.ToUpper(cmd), args: strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	return out
}

// ciBuildCommand is the go build line of .ci/build.
func ciBuildCommand(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "build"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "go build") && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) != 1 {
		t.Fatalf(".ci/build: %d go build lines, want 1: %q", len(lines), lines)
	}
	return lines[0]
}

// TestDockerfileBuildIsCIBuild: the image is built by the command CI runs.
// TestMain ran .ci/build to make the binaries every other test uses, so CI
// exercises exactly the Dockerfile's build.
func TestDockerfileBuildIsCIBuild(t *testing.T) {
	build := ciBuildCommand(t)
	for _, want := range []string{"CGO_ENABLED=0 go build", "./cmd/leasegate", "./cmd/leasectl", "-trimpath"} {
		if !strings.Contains(build, want) {
			t.Errorf(".ci/build: %q lacks %q", build, want)
		}
	}
	instrs := readDockerfile(t)
	var stages []string
	var buildRuns []string
	for _, in := range instrs {
		if in.cmd == "FROM" {
			stages = append(stages, in.args)
		}
		if in.cmd == "RUN" && len(stages) == 1 && strings.Contains(in.args, "go build") {
			t.Errorf("Dockerfile: RUN %q calls go build itself; run .ci/build so the image builds as CI does", in.args)
		}
		if in.cmd == "RUN" && strings.Contains(in.args, ".ci/build") {
			if len(stages) != 1 {
				t.Errorf("Dockerfile: .ci/build runs outside the build stage")
			}
			buildRuns = append(buildRuns, in.args)
		}
	}
	if len(buildRuns) != 1 || !regexp.MustCompile(`(^|\s)\.ci/build /out$`).MatchString(buildRuns[0]) {
		t.Errorf("Dockerfile: build stage runs %q, want exactly one RUN … .ci/build /out", buildRuns)
	}
	if len(stages) != 2 {
		t.Fatalf("Dockerfile: stages %q, want build and runtime", stages)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(must(os.ReadFile(filepath.Join(repoRoot, "go.mod")))))
	if !strings.Contains(stages[0], "golang:"+goVersion[1]+" AS build") {
		t.Errorf("Dockerfile: build stage %q, want golang:%s (go.mod's Go) AS build", stages[0], goVersion[1])
	}
	if !strings.HasPrefix(stages[1], "gcr.io/distroless/static") && stages[1] != "scratch" {
		t.Errorf("Dockerfile: runtime stage %q, want distroless/static or scratch", stages[1])
	}
}

// TestDockerfileCopiesEveryModule: the build stage copies the go.mod and
// go.sum of every module in the repository before `go mod download`; the
// root go.mod replaces the nested modules (client/, fence/, proto/) with
// their directories, so without their go.mod files the download fails.
func TestDockerfileCopiesEveryModule(t *testing.T) {
	var want []string
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			dir, _ := filepath.Rel(repoRoot, filepath.Dir(p))
			want = append(want, filepath.ToSlash(filepath.Join(dir, "go.mod")), filepath.ToSlash(filepath.Join(dir, "go.sum")))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var copied []string
	downloaded := false
	for _, in := range readDockerfile(t) {
		if in.cmd == "RUN" && strings.Contains(in.args, "go mod download") {
			downloaded = true
			break
		}
		if in.cmd == "COPY" {
			fields := strings.Fields(in.args)
			for _, src := range fields[:max(len(fields)-1, 0)] {
				if !strings.HasPrefix(src, "--") {
					copied = append(copied, strings.TrimPrefix(src, "./"))
				}
			}
		}
	}
	if !downloaded {
		t.Fatal("Dockerfile: the build stage runs no go mod download")
	}
	for _, f := range want {
		if !slices.Contains(copied, f) {
			t.Errorf("Dockerfile: %s is not copied before go mod download (copied: %q)", f, copied)
		}
	}
}

func TestDockerfileRuntime(t *testing.T) {
	var user, entrypoint string
	var copies, envs, expose []string
	stage := 0
	for _, in := range readDockerfile(t) {
		switch in.cmd {
		case "FROM":
			stage++
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			if stage == 2 {
				copies = append(copies, in.args)
			}
		case "ENV":
			for _, kv := range strings.Fields(in.args) {
				envs = append(envs, kv)
			}
		case "EXPOSE":
			expose = append(expose, strings.Fields(in.args)...)
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "0" || u == "root" {
		t.Errorf("Dockerfile: USER %q, want a non-root user", user)
	}
	if !slices.ContainsFunc(copies, func(c string) bool {
		return strings.Contains(c, "--from=build") && strings.Contains(c, "/out/leasegate") && strings.Contains(c, "/out/leasectl")
	}) {
		t.Errorf("Dockerfile: the runtime stage must copy leasegate and leasectl from the build stage; COPY lines %q", copies)
	}
	if entrypoint != `["/usr/local/bin/leasegate"]` {
		t.Errorf("Dockerfile: ENTRYPOINT %s, want [\"/usr/local/bin/leasegate\"]", entrypoint)
	}
	var names, env []string
	for _, kv := range envs {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
		env = append(env, kv)
	}
	checkEnv(t, "Dockerfile ENV", names)
	checkValidConfig(t, "Dockerfile ENV", append(env, "LEASEGATE_ALLOW_INSECURE_REMOTE=true"))
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LEASEGATE_LISTEN="); ok && !strings.HasSuffix(v, ":"+gatewayPort) {
			t.Errorf("Dockerfile: LEASEGATE_LISTEN=%s, want port %s", v, gatewayPort)
		}
	}
	if !slices.Equal(expose, []string{gatewayPort}) {
		t.Errorf("Dockerfile: EXPOSE %q, want %s", expose, gatewayPort)
	}
}

// TestBinariesStatic: .ci/build's binaries need no dynamic loader, so they
// run on distroless/static or scratch.
func TestBinariesStatic(t *testing.T) {
	for _, name := range []string{"leasegate", "leasectl"} {
		f, err := elf.Open(filepath.Join(binDir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a program interpreter: it is dynamically linked", name)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s needs shared libraries %q", name, libs)
		}
		f.Close()
	}
}

// TestDockerignoreKeepsSources: the build context keeps what .ci/build needs.
func TestDockerignoreKeepsSources(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if strings.HasPrefix(l, "!") {
				t.Fatalf(".dockerignore: exceptions (%q) are not understood by this test; keep to exclusions", l)
			}
			patterns = append(patterns, l)
		}
	}
	excluded := func(path string) string {
		for _, p := range patterns {
			for _, cand := range []string{path, filepath.Base(path)} {
				if ok, _ := filepath.Match(strings.TrimPrefix(p, "**/"), cand); ok && (cand == path || strings.HasPrefix(p, "**/")) {
					return p
				}
			}
			if strings.HasPrefix(path, p+"/") {
				return p
			}
		}
		return ""
	}
	keep := []string{"go.mod", "go.sum", ".ci/build", "cmd/leasegate/main.go", "cmd/leasectl/main.go"}
	err = filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		// .ci/tools holds the tools modules (goreleaser's), which the image
		// build does not use; dist is goreleaser's output.
		if d.IsDir() && (rel == ".git" || rel == "deploy" || rel == "docs" || rel == filepath.Join(".ci", "tools") || rel == "dist") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") && !strings.Contains(rel, "testdata") {
			keep = append(keep, rel)
		}
		if !d.IsDir() && rel != "go.mod" && rel != "go.sum" && (d.Name() == "go.mod" || d.Name() == "go.sum") {
			keep = append(keep, rel) // a nested module's
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keep {
		if p := excluded(k); p != "" {
			t.Errorf(".dockerignore pattern %q excludes %s, which the image build needs", p, k)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
