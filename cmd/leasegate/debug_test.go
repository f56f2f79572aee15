package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebugListenWiring: --debug-listen reaches the server's configuration
// from the command line, the environment and the config file alike, and a
// non-loopback address without bearer authentication is refused as a
// usage error before anything starts.
func TestDebugListenWiring(t *testing.T) {
	file := filepath.Join(t.TempDir(), "leasegate.yaml")
	if err := os.WriteFile(file, []byte("debug-listen: \"0.0.0.0:6060\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  string
	}{
		{"flag", []string{"--debug-listen", "0.0.0.0:6060"}, ""},
		{"environment", nil, "0.0.0.0:6060"},
		{"config file", []string{"--config", file}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("LEASEGATE_DEBUG_LISTEN", tc.env)
			}
			cmd := newRootCmd()
			cmd.SetArgs(tc.args)
			err := cmd.Execute()
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), "refusing to serve the profiler on 0.0.0.0:6060 without bearer authentication") {
				t.Fatalf("leasegate with a non-loopback debug listener and no auth, set by %s: %v; want a usage error refusing it", tc.name, err)
			}
		})
	}
}
