package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestHelpShowsEnv checks that --help names the environment variable of
// every flag that has one, and that --endpoint has LEASEGATE_ENDPOINT.
func TestHelpShowsEnv(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCmd(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	envs := map[string]string{}
	cmd.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if e := f.Annotations[envAnnotation]; len(e) == 1 {
			envs[f.Name] = e[0]
		}
	})
	if envs["endpoint"] != envEndpoint {
		t.Errorf("--endpoint falls back to %q; want %s", envs["endpoint"], envEndpoint)
	}
	for name, env := range envs {
		var line string
		for _, l := range strings.Split(help, "\n") {
			// The flag's own line: "  -x, --name type  usage" or
			// "      --name type  usage"; another flag's usage may mention it.
			f := strings.Fields(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "-")))
			if len(f) > 0 && (f[0] == "-"+name || (len(f) > 1 && f[1] == "--"+name)) {
				line = l
			}
		}
		if !strings.Contains(line, "[$"+env+"]") {
			t.Errorf("--help line for --%s = %q; want it to name $%s", name, line, env)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCmd(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); !strings.HasPrefix(got, "leasectl ") || !strings.Contains(got, runtime.Version()) {
		t.Errorf("leasectl --version = %q; want \"leasectl VERSION (… %s)\"", got, runtime.Version())
	}
}

// TestEveryFlagIsShown: every command and flag leasectl accepts is listed
// in its --help and does what it says; none is hidden, deprecated or
// accepted only to be ignored.
func TestEveryFlagIsShown(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Deprecated != "" {
			t.Errorf("command %q is hidden or deprecated", c.CommandPath())
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Deprecated != "" || f.ShorthandDeprecated != "" {
				t.Errorf("%s --%s is hidden or deprecated", c.CommandPath(), f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(&bytes.Buffer{}))
}
