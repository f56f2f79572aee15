package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	corev1 "k8s.io/api/core/v1"
)

// The dashboards and what holds them to the gateway.
var (
	// fleetDashboard is the gateway fleet's dashboard, kept once: the
	// compose stacks mount its directory, Kubernetes gets it as the
	// ConfigMap in dashboardConfigMap.
	fleetDashboard = filepath.Join("deploy", "observability", "grafana", "dashboards", "leasegate.json")
	// stackDashboard is the compose stack's Envoy and etcd board.
	stackDashboard = filepath.Join("deploy", "compose", "observability", "grafana", "dashboards", "stack.json")
	// exportedMetricsList is written by internal/server's
	// TestExportedMetricsList from a live gateway's /metrics.
	exportedMetricsList = filepath.Join("deploy", "observability", "exported-metrics.txt")
	// dashboardConfigMap is generated from fleetDashboard (-update).
	dashboardConfigMap = "dashboards.yaml"
	// chartDashboard, in the chart's directory, is a copy of fleetDashboard
	// (a chart cannot read files outside its directory; -update).
	chartDashboard = "files/leasegate.json"
)

// grafanaDashboardLabel is the label the Grafana sidecar (grafana Helm
// chart, kube-prometheus-stack) looks for on dashboard ConfigMaps.
const grafanaDashboardLabel = "grafana_dashboard"

var leasegateMetric = regexp.MustCompile(`\bleasegate_[a-zA-Z0-9_]+`)

// exportedSamples reads the exported metric list as the sample names a
// query may use: a histogram's _bucket, _sum and _count, the others as is.
func exportedSamples(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, exportedMetricsList))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, typ, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "leasegate_") {
			t.Fatalf("%s: line %q; want NAME TYPE", exportedMetricsList, line)
		}
		if typ == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name+s] = true
			}
			continue
		}
		out[name] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s lists no metric", exportedMetricsList)
	}
	return out
}

// grafanaDashboard is the part of a dashboard the checks read.
type grafanaDashboard struct {
	UID        string         `json:"uid"`
	Title      string         `json:"title"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []grafanaVar `json:"list"`
	} `json:"templating"`
}

// grafanaVar is a dashboard variable.
type grafanaVar struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

type grafanaPanel struct {
	Title      string          `json:"title"`
	Type       string          `json:"type"`
	Datasource json.RawMessage `json:"datasource"`
	Panels     []grafanaPanel  `json:"panels"`
	Targets    []struct {
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
}

func readDashboard(t *testing.T, rel string) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s does not parse: %v", rel, err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: uid %q, title %q, %d panels; want all set", rel, d.UID, d.Title, len(d.Panels))
	}
	return d
}

func flatPanels(ps []grafanaPanel) []grafanaPanel {
	var out []grafanaPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatPanels(p.Panels)...)
	}
	return out
}

// checkDatasource fails t unless raw (a panel's or target's datasource) is
// the dashboard's Prometheus variable: {"type": "prometheus", "uid":
// "${datasource}"}. A plain string would name a data source, which differs
// between Grafanas.
func checkDatasource(t *testing.T, what string, raw json.RawMessage) {
	t.Helper()
	var ds struct{ Type, UID string }
	if err := json.Unmarshal(raw, &ds); err != nil || ds.Type != "prometheus" || ds.UID != "${datasource}" {
		t.Errorf("%s: data source %s; want {\"type\": \"prometheus\", \"uid\": \"${datasource}\"}", what, raw)
	}
}

// TestDashboards parses both dashboards and checks their data sources, and
// that every leasegate metric a query of theirs names is exported; the
// fleet dashboard must also show every exported metric.
func TestDashboards(t *testing.T) {
	exported := exportedSamples(t)
	uids := map[string]string{}
	for _, rel := range []string{fleetDashboard, stackDashboard} {
		d := readDashboard(t, rel)
		if other, ok := uids[d.UID]; ok {
			t.Errorf("%s and %s share uid %q", rel, other, d.UID)
		}
		uids[d.UID] = rel
		hasVar := slices.ContainsFunc(d.Templating.List, func(v grafanaVar) bool {
			return v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"`
		})
		if !hasVar {
			t.Errorf("%s: no variable datasource of type datasource (query prometheus)", rel)
		}
		for _, v := range d.Templating.List {
			for _, m := range leasegateMetric.FindAllString(string(v.Query), -1) {
				if !exported[m] {
					t.Errorf("%s: variable %s queries %s, which the gateway does not export", rel, v.Name, m)
				}
			}
		}
		used := map[string]bool{}
		for _, p := range flatPanels(d.Panels) {
			if p.Type == "row" {
				continue
			}
			what := fmt.Sprintf("%s panel %q", rel, p.Title)
			checkDatasource(t, what, p.Datasource)
			if len(p.Targets) == 0 {
				t.Errorf("%s has no queries", what)
			}
			for _, tg := range p.Targets {
				checkDatasource(t, what+" query", tg.Datasource)
				for _, m := range leasegateMetric.FindAllString(tg.Expr, -1) {
					used[m] = true
					if !exported[m] {
						t.Errorf("%s uses %s, which the gateway does not export (%s)", what, m, exportedMetricsList)
					}
				}
			}
		}
		if rel != fleetDashboard {
			continue
		}
		for m := range exported {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
			if !used[m] && !used[base+"_bucket"] && !used[base+"_count"] && !used[base+"_sum"] {
				t.Errorf("%s shows no panel of %s, which the gateway exports", rel, m)
			}
		}
	}
}

// TestComposeGrafana: the compose stack's Grafana provisions both
// dashboards from mounted directories, its Prometheus data source links
// exemplars to the Tempo data source by uid, and Prometheus stores
// exemplars.
func TestComposeGrafana(t *testing.T) {
	p := loadCompose(t)
	graf := service(t, p, "grafana")
	mounts := map[string]string{} // target → source
	for _, v := range graf.Volumes {
		if v.Type == types.VolumeTypeBind {
			mounts[v.Target] = v.Source
		}
	}
	provisioning, ok := mounts["/etc/grafana/provisioning"]
	if !ok {
		t.Fatalf("service grafana mounts no /etc/grafana/provisioning (mounts %v)", mounts)
	}
	var providers struct {
		Providers []struct {
			Name    string `json:"name"`
			Type    string `json:"type"`
			Options struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	readYAML(t, filepath.Join(provisioning, "dashboards", "dashboards.yaml"), &providers)
	provided := map[string]bool{} // dashboard files, repository-relative
	for _, pr := range providers.Providers {
		src, ok := mounts[pr.Options.Path]
		if pr.Type != "file" || !ok {
			t.Errorf("dashboard provider %s: type %q, path %q; want type file and a path grafana mounts", pr.Name, pr.Type, pr.Options.Path)
			continue
		}
		files, _ := filepath.Glob(filepath.Join(src, "*.json"))
		for _, f := range files {
			rel, _ := filepath.Rel(repoRoot, f)
			provided[rel] = true
		}
	}
	for _, want := range []string{fleetDashboard, stackDashboard} {
		if !provided[want] {
			t.Errorf("Grafana's dashboard providers do not load %s (they load %q)", want, sortedKeys(provided))
		}
	}
	if home := graf.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home == nil || mounts[filepath.Dir(*home)] == "" ||
		!provided[mustRel(t, filepath.Join(mounts[filepath.Dir(*home)], filepath.Base(*home)))] {
		t.Errorf("service grafana: home dashboard %v is not a provisioned dashboard", home)
	}

	var ds struct {
		Datasources []struct {
			Name     string `json:"name"`
			UID      string `json:"uid"`
			Type     string `json:"type"`
			JSONData struct {
				Exemplars []struct {
					Name          string `json:"name"`
					DatasourceUID string `json:"datasourceUid"`
				} `json:"exemplarTraceIdDestinations"`
			} `json:"jsonData"`
		} `json:"datasources"`
	}
	readYAML(t, filepath.Join(provisioning, "datasources", "datasources.yaml"), &ds)
	types := map[string]string{}
	for _, d := range ds.Datasources {
		types[d.UID] = d.Type
	}
	var prom int
	for _, d := range ds.Datasources {
		if d.Type != "prometheus" {
			continue
		}
		prom++
		ex := d.JSONData.Exemplars
		if len(ex) != 1 || ex[0].Name != "trace_id" || types[ex[0].DatasourceUID] != "tempo" {
			t.Errorf("data source %s: exemplarTraceIdDestinations %+v; want trace_id (the gateway's exemplar label) → the uid of a provisioned Tempo", d.UID, ex)
		}
	}
	if prom != 1 {
		t.Errorf("%d Prometheus data sources provisioned; want 1", prom)
	}
	if !slices.Contains(service(t, p, "prometheus").Command, "--enable-feature=exemplar-storage") {
		t.Error("service prometheus: no --enable-feature=exemplar-storage; exemplars would be dropped")
	}
}

func mustRel(t *testing.T, path string) string {
	t.Helper()
	rel, err := filepath.Rel(repoRoot, path)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// dashboardConfigMapYAML is the ConfigMap that carries the fleet dashboard
// to Kubernetes' Grafana sidecar.
func dashboardConfigMapYAML(dashboard []byte) string {
	var b strings.Builder
	b.WriteString(`# The fleet dashboard for Grafana's dashboard sidecar (label
# grafana_dashboard: "1"; the sidecar must watch this namespace, or set
# its searchNamespace to ALL). The dashboard picks its Prometheus through
# its ${datasource} variable: no data source name is assumed.
#
# Generated from deploy/observability/grafana/dashboards/leasegate.json:
# edit that file, then run go test ./deploy -run TestKubernetesDashboard -update
apiVersion: v1
kind: ConfigMap
metadata:
  name: leasegate-dashboards
  namespace: leasegate
  labels:
    app.kubernetes.io/name: leasegate
    app.kubernetes.io/part-of: leasegate
    ` + grafanaDashboardLabel + `: "1"
  annotations:
    grafana_folder: leasegate
data:
  leasegate.json: |
`)
	for _, line := range strings.Split(strings.TrimSuffix(string(dashboard), "\n"), "\n") {
		b.WriteString("    " + line + "\n")
	}
	return b.String()
}

// TestKubernetesDashboard: the base ships the fleet dashboard, unchanged,
// in a ConfigMap the Grafana sidecar picks up. With -update it regenerates
// the ConfigMap from the dashboard.
func TestKubernetesDashboard(t *testing.T) {
	dash, err := os.ReadFile(filepath.Join(repoRoot, fleetDashboard))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(k8sDir(), dashboardConfigMap)
	if *update {
		if err := os.WriteFile(path, []byte(dashboardConfigMapYAML(dash)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(chartDir(), chartDashboard), dash, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if k := readKustomization(t); !slices.Contains(k.Resources, dashboardConfigMap) {
		t.Errorf("kustomization.yaml resources %q lack %s", k.Resources, dashboardConfigMap)
	}
	eachManifests(t, func(t *testing.T, m *manifests) {
		var found []*corev1.ConfigMap
		for _, cm := range m.configMaps {
			if cm.Labels[grafanaDashboardLabel] == "1" {
				found = append(found, cm)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d ConfigMaps labelled %s: \"1\"; want 1", len(found), grafanaDashboardLabel)
		}
		if got := found[0].Data["leasegate.json"]; got != string(dash) {
			t.Errorf("ConfigMap %s: leasegate.json differs from %s; run go test ./deploy -run TestKubernetesDashboard -update", found[0].Name, fleetDashboard)
		}
		if found[0].Annotations["grafana_folder"] == "" {
			t.Errorf("ConfigMap %s: no grafana_folder annotation", found[0].Name)
		}
	})
}
