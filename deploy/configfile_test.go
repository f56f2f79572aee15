package deploy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFile checks --config through the real binary: YAML and JSON,
// precedence flags > environment > file, and strictness. Each case makes
// validation fail on purpose, so the message shows which value won.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	yamlFile := write("c.yaml", "listen: from-file\nshards: 3\n")
	jsonFile := write("c.json", `{"listen": "127.0.0.1:0", "etcd": ["a=ftp://json"]}`)
	listFile := write("list.yaml", "listen: 127.0.0.1:0\netcd:\n  - a=http://a:2379\n  - b=ftp://second\n")
	unknown := write("unknown.yaml", "lisen: 127.0.0.1:0\n")
	dup := write("dup.yaml", "listen: a\nlisten: b\n")
	nested := write("nested.yaml", "listen:\n  host: x\n")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"file", nil, []string{"--config", yamlFile}, `listen address "from-file"`},
		{"env beats file", []string{"LEASEGATE_LISTEN=from-env"}, []string{"--config", yamlFile}, `listen address "from-env"`},
		{"flag beats env and file", []string{"LEASEGATE_LISTEN=from-env"}, []string{"--config", yamlFile, "--listen", "from-flag"}, `listen address "from-flag"`},
		{"LEASEGATE_CONFIG", []string{"LEASEGATE_CONFIG=" + yamlFile}, nil, `listen address "from-file"`},
		{"json", nil, []string{"--config", jsonFile}, `endpoint "ftp://json"`},
		{"repeated flag as a list", nil, []string{"--config", listFile}, `endpoint "ftp://second"`},
		{"unknown key", nil, []string{"--config", unknown}, `unknown key "lisen"`},
		{"duplicate key", nil, []string{"--config", dup}, `"listen" already set`},
		{"nested value", nil, []string{"--config", nested}, `key "listen": want a string, number or boolean`},
		{"missing file", nil, []string{"--config", filepath.Join(dir, "none.yaml")}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := leasegateOutput(tc.env, tc.args...)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("leasegate %q (env %q) = %v, %q; want an error containing %q", tc.args, tc.env, err, out, tc.want)
			}
		})
	}
}
