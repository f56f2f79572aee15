package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/leasegate/leasegate/internal/buildinfo"
)

// TestHelpShowsEnv checks that --help names, for every flag, the variable
// applyEnv reads for it, and that applyEnv does read that variable.
func TestHelpShowsEnv(t *testing.T) {
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[0], "-") && !strings.HasPrefix(f[0], "--") {
			f = f[1:] // "-h, --help"
		}
		if len(f) > 0 && strings.HasPrefix(f[0], "--") {
			lines[strings.TrimPrefix(f[0], "--")] = line
		}
	}
	n := 0
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		line, ok := lines[f.Name]
		switch {
		case !ok:
			t.Errorf("--help does not list --%s", f.Name)
		case notConfig[f.Name]:
			if strings.Contains(line, "$LEASEGATE_") {
				t.Errorf("--help shows an environment variable for --%s, which the environment does not set: %q", f.Name, line)
			}
		case !strings.Contains(line, "[$"+envName(f.Name)+"]"):
			t.Errorf("--help line for --%s = %q; want it to name $%s", f.Name, line, envName(f.Name))
		default:
			n++
		}
	})
	if n < 10 {
		t.Errorf("--help shows the environment variable of %d flags; want every configuration flag", n)
	}
}

func TestApplyEnv(t *testing.T) {
	t.Setenv("LEASEGATE_DEFAULT_TTL", "42s")
	t.Setenv("LEASEGATE_ETCD", "a=http://a:2379 b=http://b:2379")
	t.Setenv("LEASEGATE_LISTEN", ":9999")
	t.Setenv("LEASEGATE_VERSION", "v1.2.3") // a build script's, not ours
	cmd := newRootCmd()
	fs := cmd.Flags()
	cmd.InitDefaultVersionFlag()
	if err := fs.Parse([]string{"--listen=127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs); err != nil {
		t.Fatalf("applyEnv: %v", err)
	}
	if d, _ := fs.GetDuration("default-ttl"); d != 42*time.Second {
		t.Errorf("--default-ttl from LEASEGATE_DEFAULT_TTL = %v; want 42s", d)
	}
	if e, _ := fs.GetStringArray("etcd"); len(e) != 2 || e[0] != "a=http://a:2379" || e[1] != "b=http://b:2379" {
		t.Errorf("--etcd from LEASEGATE_ETCD = %q; want two clusters", e)
	}
	if l, _ := fs.GetString("listen"); l != "127.0.0.1:1" {
		t.Errorf("--listen = %q; want the command line's 127.0.0.1:1 over LEASEGATE_LISTEN", l)
	}
	if v, _ := fs.GetBool("version"); v {
		t.Error("LEASEGATE_VERSION set --version")
	}
}

func TestVersionFlag(t *testing.T) {
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSpace(out.String())
	// A test binary carries no stamped version and no VCS settings, so it
	// reports the module's version (devel) and the toolchain.
	info := buildinfo.Read()
	if !strings.HasPrefix(got, "leasegate "+info.Version+" (") || !strings.Contains(got, runtime.Version()) {
		t.Errorf("leasegate --version = %q; want \"leasegate %s (…%s)\"", got, info.Version, runtime.Version())
	}
}
