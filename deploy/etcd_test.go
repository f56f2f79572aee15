package deploy_test

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"
)

// Ports every deploy file must agree on.
const (
	gatewayPort     = "7070"
	etcdClientPort  = "2379"
	etcdPeerPort    = "2380"
	etcdMetricsPort = "2381"
)

// etcdMember is one etcd member's command line, parsed by etcd's own flags.
type etcdMember struct {
	flags map[string]string // flag name → value, as given
}

// parseEtcdArgs parses args with the flag set of the etcd server leasegate
// builds against (go.mod), so an unknown flag or a malformed value fails
// here as it would fail etcd.
func parseEtcdArgs(args []string) (etcdMember, error) {
	cfg := embed.NewConfig()
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.AddFlags(fs)
	// The flags etcd's main (etcdmain) adds to embed's.
	fs.Var(&oneOf{valid: []string{"new", "existing"}}, "initial-cluster-state", "")
	fs.Var(&oneOf{valid: []string{"exit", "proxy"}}, "discovery-fallback", "")
	fs.Var(&oneOf{valid: []string{"not-yet", "write-only", "write-only-drop-data", "gone"}}, "v2-deprecation", "")
	fs.String("config-file", "", "")
	fs.Bool("version", false, "")
	if err := fs.Parse(args); err != nil {
		return etcdMember{}, err
	}
	if fs.NArg() > 0 {
		return etcdMember{}, fmt.Errorf("stray arguments %q", fs.Args())
	}
	m := etcdMember{flags: map[string]string{}}
	fs.Visit(func(f *flag.Flag) { m.flags[f.Name] = f.Value.String() })
	return m, nil
}

// oneOf is a flag taking one of a fixed set of values, as etcd's
// SelectiveStringValue.
type oneOf struct {
	valid []string
	v     string
}

func (o *oneOf) String() string { return o.v }

func (o *oneOf) Set(s string) error {
	if !slices.Contains(o.valid, s) {
		return fmt.Errorf("invalid value %q, want one of %q", s, o.valid)
	}
	o.v = s
	return nil
}

// checkEtcdMember checks one member of cluster, whose members are named
// members and reached at host(member). It returns nothing: every problem is
// reported on t.
func checkEtcdMember(t *testing.T, what, cluster, name string, members []string, host func(string) string, args []string) {
	t.Helper()
	m, err := parseEtcdArgs(args)
	if err != nil {
		t.Errorf("%s: etcd rejects the command line: %v", what, err)
		return
	}
	want := map[string]string{
		"name":                        name,
		"listen-client-urls":          "http://0.0.0.0:" + etcdClientPort,
		"listen-peer-urls":            "http://0.0.0.0:" + etcdPeerPort,
		"listen-metrics-urls":         "http://0.0.0.0:" + etcdMetricsPort,
		"advertise-client-urls":       "http://" + host(name) + ":" + etcdClientPort,
		"initial-advertise-peer-urls": "http://" + host(name) + ":" + etcdPeerPort,
		"initial-cluster-state":       "new",
		"initial-cluster-token":       "leasegate-" + cluster,
	}
	var ic []string
	for _, mem := range members {
		ic = append(ic, mem+"=http://"+host(mem)+":"+etcdPeerPort)
	}
	want["initial-cluster"] = strings.Join(ic, ",")
	for k, v := range want {
		if got := m.flags[k]; got != v {
			t.Errorf("%s: --%s=%q, want %q", what, k, got, v)
		}
	}
	for _, k := range []string{"data-dir", "auto-compaction-retention", "feature-gates"} {
		if m.flags[k] == "" {
			t.Errorf("%s: --%s is not set", what, k)
		}
	}
}

// goModEtcdVersion is the etcd server version leasegate builds against.
func goModEtcdVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*go\.etcd\.io/etcd/server/v3 (v\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod does not require go.etcd.io/etcd/server/v3")
	}
	return string(m[1])
}

// checkEtcdImage wants the official etcd image at the version whose flags
// parseEtcdArgs checks.
func checkEtcdImage(t *testing.T, what, image string) {
	t.Helper()
	want := "gcr.io/etcd-development/etcd:" + goModEtcdVersion(t)
	if image != want {
		t.Errorf("%s: image %q, want %q (the etcd version in go.mod, whose flags these tests check)", what, image, want)
	}
}

// etcdClusterArg parses a leasegate --etcd value: name=url1,url2.
func etcdClusterArg(v string) (name string, hosts []string, err error) {
	name, urls, ok := strings.Cut(v, "=")
	if !ok {
		return "", nil, fmt.Errorf("--etcd %q: want name=url1,url2", v)
	}
	for _, u := range strings.Split(urls, ",") {
		pu, err := url.Parse(u)
		if err != nil || pu.Scheme != "http" && pu.Scheme != "https" {
			return "", nil, fmt.Errorf("--etcd %q: endpoint %q is not an http(s) URL", v, u)
		}
		if pu.Port() != etcdClientPort {
			return "", nil, fmt.Errorf("--etcd %q: endpoint %q is not on etcd's client port %s", v, u, etcdClientPort)
		}
		hosts = append(hosts, pu.Hostname())
	}
	return name, hosts, nil
}
