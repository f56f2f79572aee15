package deploy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	// The typed configs envoy.yaml uses, registered for protojson.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

func composeDir() string { return filepath.Join(repoRoot, "deploy", "compose") }

// loadCompose loads compose.yaml (and what it includes) with the
// compose-spec library, validating it against the Compose schema.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(composeDir(), "compose.yaml")},
		cli.WithWorkingDirectory(composeDir()),
		cli.WithEnv([]string{}),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("compose.yaml has no service %q (has %q)", name, sortedKeys(p.Services))
	}
	return s
}

// composeEtcd groups the etcd services by cluster: etcd-a-0 is member 0 of etcd-a.
func composeEtcd(p *types.Project) map[string][]string {
	out := map[string][]string{}
	for name, s := range p.Services {
		if strings.HasPrefix(s.Image, "gcr.io/etcd-development/etcd:") {
			i := strings.LastIndex(name, "-")
			out[name[:i]] = append(out[name[:i]], name)
		}
	}
	for _, members := range out {
		slices.Sort(members)
	}
	return out
}

func TestComposeEtcd(t *testing.T) {
	p := loadCompose(t)
	clusters := composeEtcd(p)
	if len(clusters) != 3 {
		t.Fatalf("etcd clusters %v, want 3", clusters)
	}
	for cluster, members := range clusters {
		for i, m := range members {
			if m != fmt.Sprintf("%s-%d", cluster, i) {
				t.Errorf("etcd cluster %s: members %q, want %s-0, %s-1, …", cluster, members, cluster, cluster)
			}
			s := service(t, p, m)
			checkEtcdImage(t, "service "+m, s.Image)
			if !slices.Equal(s.Entrypoint, []string{"/usr/local/bin/etcd"}) {
				t.Errorf("service %s: entrypoint %q, want /usr/local/bin/etcd", m, s.Entrypoint)
			}
			checkEtcdMember(t, "service "+m, cluster, m, members, func(h string) string { return h }, s.Command)
			if s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 {
				t.Errorf("service %s: no healthcheck (the gateways wait for it)", m)
			}
		}
	}
}

func TestComposeGateway(t *testing.T) {
	p := loadCompose(t)
	gw := service(t, p, "leasegate")
	if gw.Deploy == nil || gw.Deploy.Replicas == nil || *gw.Deploy.Replicas != 2 {
		t.Errorf("service leasegate: want deploy.replicas 2")
	}
	if gw.Build == nil || filepath.Join(gw.Build.Context, gw.Build.Dockerfile) != filepath.Join(repoRoot, "Dockerfile") {
		t.Errorf("service leasegate: want it built from the repository's Dockerfile, got %+v", gw.Build)
	}
	checkFlagArgs(t, "service leasegate command", gw.Command)
	var envNames, env []string
	for k, v := range gw.Environment {
		envNames = append(envNames, k)
		if strings.HasPrefix(k, "LEASEGATE_") && v != nil {
			env = append(env, k+"="+*v)
		}
	}
	checkEnv(t, "service leasegate environment", envNames)
	checkValidConfig(t, "service leasegate", env, gw.Command...)

	if _, port, _ := net.SplitHostPort(flagValue(gw.Command, "listen")); port != gatewayPort {
		t.Errorf("service leasegate: --listen=%q, want port %s", flagValue(gw.Command, "listen"), gatewayPort)
	}
	// --etcd names every compose etcd cluster, with every member.
	clusters := composeEtcd(p)
	seen := map[string]bool{}
	for _, a := range gw.Command {
		v, ok := strings.CutPrefix(a, "--etcd=")
		if !ok {
			continue
		}
		name, hosts, err := etcdClusterArg(v)
		if err != nil {
			t.Error(err)
			continue
		}
		seen[name] = true
		if !slices.Equal(hosts, clusters[name]) {
			t.Errorf("service leasegate --etcd %s: hosts %q, want the cluster's services %q", name, hosts, clusters[name])
		}
		if _, ok := gw.DependsOn[hosts[0]]; !ok {
			t.Errorf("service leasegate: does not wait for %s", hosts[0])
		}
	}
	for c := range clusters {
		if !seen[c] {
			t.Errorf("etcd cluster %s is not in service leasegate's --etcd flags", c)
		}
	}
	if gw.HealthCheck == nil || len(gw.HealthCheck.Test) < 2 || !strings.HasSuffix(gw.HealthCheck.Test[1], "/leasectl") ||
		!slices.Contains(gw.HealthCheck.Test, "--endpoint=http://127.0.0.1:"+gatewayPort) {
		t.Errorf("service leasegate: healthcheck %q, want leasectl against port %s", gw.HealthCheck.Test, gatewayPort)
	}
}

// TestComposeEnvoy decodes envoy.yaml into Envoy's bootstrap API (unknown
// fields fail), runs Envoy's validation rules on it, and checks that it
// balances over the compose gateway service on the gateway port.
func TestComposeEnvoy(t *testing.T) {
	p := loadCompose(t)
	lb := service(t, p, "lb")
	b, err := os.ReadFile(filepath.Join(composeDir(), "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	if !slices.ContainsFunc(lb.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Source == filepath.Join(composeDir(), "envoy.yaml") && v.Target == "/etc/envoy/envoy.yaml"
	}) || !slices.Contains(lb.Command, "/etc/envoy/envoy.yaml") {
		t.Errorf("service lb: want envoy.yaml mounted at /etc/envoy/envoy.yaml and passed as --config-path")
	}
	listeners := boot.GetStaticResources().GetListeners()
	if len(listeners) != 1 {
		t.Fatalf("envoy.yaml: %d listeners, want 1", len(listeners))
	}
	lport := strconv.Itoa(int(listeners[0].GetAddress().GetSocketAddress().GetPortValue()))
	if lport != gatewayPort {
		t.Errorf("envoy.yaml: listener on %s, want %s", lport, gatewayPort)
	}
	if !slices.ContainsFunc(lb.Ports, func(pc types.ServicePortConfig) bool {
		return strconv.Itoa(int(pc.Target)) == lport && pc.Published == gatewayPort && pc.HostIP == "127.0.0.1"
	}) {
		t.Errorf("service lb: want 127.0.0.1:%s published to the listener port %s", gatewayPort, lport)
	}
	admin := strconv.Itoa(int(boot.GetAdmin().GetAddress().GetSocketAddress().GetPortValue()))
	for _, c := range boot.GetStaticResources().GetClusters() {
		for _, e := range c.GetLoadAssignment().GetEndpoints() {
			for _, le := range e.GetLbEndpoints() {
				sa := le.GetEndpoint().GetAddress().GetSocketAddress()
				if _, ok := p.Services[sa.GetAddress()]; !ok || sa.GetAddress() != "leasegate" || strconv.Itoa(int(sa.GetPortValue())) != gatewayPort {
					t.Errorf("envoy.yaml cluster %s: endpoint %s:%d, want leasegate:%s", c.GetName(), sa.GetAddress(), sa.GetPortValue(), gatewayPort)
				}
			}
		}
	}
	checkPrometheusTarget(t, p, "envoy", "lb:"+admin)
}

// prometheusConfig is the part of prometheus.yml the stack uses; decoding
// strictly catches typos in it.
type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `json:"scrape_interval"`
		EvaluationInterval string `json:"evaluation_interval"`
	} `json:"global"`
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		MetricsPath   string `json:"metrics_path,omitempty"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs,omitempty"`
		DNSSDConfigs []struct {
			Names []string `json:"names"`
			Type  string   `json:"type"`
			Port  int      `json:"port"`
		} `json:"dns_sd_configs,omitempty"`
	} `json:"scrape_configs"`
}

// prometheusTargets returns the targets of job in the compose Prometheus.
func prometheusTargets(t *testing.T, p *types.Project, job string) []string {
	t.Helper()
	prom := service(t, p, "prometheus")
	var file string
	for _, v := range prom.Volumes {
		if v.Target == "/etc/prometheus/prometheus.yml" {
			file = v.Source
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("service prometheus: its config: %v", err)
	}
	var cfg prometheusConfig
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName != job {
			continue
		}
		var out []string
		for _, s := range sc.StaticConfigs {
			out = append(out, s.Targets...)
		}
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				out = append(out, n+":"+strconv.Itoa(d.Port))
			}
		}
		return out
	}
	return nil
}

func checkPrometheusTarget(t *testing.T, p *types.Project, job string, want ...string) {
	t.Helper()
	if got := prometheusTargets(t, p, job); !slices.Equal(got, want) {
		t.Errorf("prometheus.yml job %s: targets %q, want %q", job, got, want)
	}
}

func TestComposeObservability(t *testing.T) {
	p := loadCompose(t)
	for _, name := range []string{"otel-collector", "tempo", "prometheus", "grafana"} {
		service(t, p, name)
	}
	// Every bind-mounted file or directory exists.
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("service %s mounts %s: %v", name, v.Source, err)
				}
			}
		}
	}
	// Prometheus scrapes every gateway replica and every etcd member on the
	// ports the stack uses.
	checkPrometheusTarget(t, p, "leasegate", "leasegate:"+gatewayPort)
	for cluster, members := range composeEtcd(p) {
		var want []string
		for _, m := range members {
			want = append(want, m+":"+etcdMetricsPort)
		}
		checkPrometheusTarget(t, p, cluster, want...)
	}
	checkPrometheusTarget(t, p, "otel-collector", "otel-collector:8889")

	// The gateways' OTLP endpoint is the collector's receiver.
	gw := service(t, p, "leasegate")
	if ep := gw.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"]; ep == nil || *ep != "http://otel-collector:4317" {
		t.Errorf("service leasegate: OTEL_EXPORTER_OTLP_ENDPOINT %v, want http://otel-collector:4317", ep)
	}
	var collector struct {
		Receivers struct {
			OTLP struct {
				Protocols map[string]struct {
					Endpoint string `json:"endpoint"`
				} `json:"protocols"`
			} `json:"otlp"`
		} `json:"receivers"`
		Exporters map[string]map[string]any `json:"exporters"`
	}
	readYAML(t, filepath.Join(composeDir(), "observability", "otel-collector.yaml"), &collector)
	if collector.Receivers.OTLP.Protocols["grpc"].Endpoint != "0.0.0.0:4317" {
		t.Errorf("otel-collector.yaml: OTLP gRPC receiver on %q, want 0.0.0.0:4317", collector.Receivers.OTLP.Protocols["grpc"].Endpoint)
	}
	if collector.Exporters["prometheus"]["endpoint"] != "0.0.0.0:8889" {
		t.Errorf("otel-collector.yaml: prometheus exporter on %v, want 0.0.0.0:8889", collector.Exporters["prometheus"]["endpoint"])
	}
	// Grafana: TestComposeGrafana (dashboards_test.go).
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
