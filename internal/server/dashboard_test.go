package server_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"
)

const observabilityDir = "../../deploy/observability"

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title      string      `json:"title"`
	Type       string      `json:"type"`
	Datasource *datasource `json:"datasource"`
	Panels     []panel     `json:"panels"` // collapsed rows
	Targets    []struct {
		Expr       string      `json:"expr"`
		Exemplar   bool        `json:"exemplar"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(observabilityDir, "grafana", "dashboards", "leasegate.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("leasegate.json does not parse: %v", err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("leasegate.json: uid %q, title %q, %d panels; want all set", d.UID, d.Title, len(d.Panels))
	}
	return d
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// sampleNames lists every sample name a scrape exposes (histograms as
// _bucket, _sum and _count).
func sampleNames(fams map[string]*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for name, f := range fams {
		out[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name+s] = true
			}
		}
	}
	return out
}

var metricRe = regexp.MustCompile(`\bleasegate_[a-zA-Z0-9_]+`)

// TestDashboardMetricsExist parses the committed Grafana dashboard and
// checks every leasegate metric its queries use against the /metrics of a
// gateway that has run a small workload; latency panels must show
// exemplars, and panels must use the provisioned Prometheus data source.
func TestDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	srv := metricsGateway(t)
	runWorkload(t, srv)
	exported := sampleNames(scrape(t, srv.URL()))

	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		if v.Type == "query" {
			for _, m := range metricRe.FindAllString(string(v.Query), -1) {
				if !exported[m] {
					t.Errorf("variable %s queries %s, which the gateway does not export", v.Name, m)
				}
			}
		}
	}
	used := map[string]bool{}
	for _, p := range allPanels(d.Panels) {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			ds := tg.Datasource
			if ds == nil {
				ds = p.Datasource
			}
			if ds == nil || ds.Type != "prometheus" || (ds.UID != "prometheus" && ds.UID != "${datasource}") {
				t.Errorf("panel %q: data source %+v; want the provisioned Prometheus (uid prometheus or ${datasource})", p.Title, ds)
			}
			for _, ref := range regexp.MustCompile(`\$\{?(\w+)`).FindAllStringSubmatch(tg.Expr, -1) {
				if !strings.HasPrefix(ref[1], "__") && !slices.Contains(vars, ref[1]) {
					t.Errorf("panel %q uses $%s, which is not a dashboard variable", p.Title, ref[1])
				}
			}
			names := metricRe.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q uses no leasegate metric", p.Title, tg.Expr)
			}
			for _, m := range names {
				used[m] = true
				if !exported[m] {
					t.Errorf("panel %q uses %s, which the gateway does not export", p.Title, m)
				}
				if strings.HasSuffix(m, "_seconds_bucket") && !tg.Exemplar {
					t.Errorf("panel %q: latency query on %s without exemplars", p.Title, m)
				}
			}
		}
	}
	// Every leasegate metric the gateway exports appears on the dashboard.
	var missing []string
	for m := range exported {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(m, "leasegate_") && !used[m] && !used[base+"_bucket"] && !used[base+"_count"] && !used[base] {
			missing = append(missing, m)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics exported but on no panel: %v", missing)
	}
}

// TestDashboardDataSources checks that the provisioned data sources are the
// ones the dashboard names, and that Prometheus exemplars link to Tempo.
func TestDashboardDataSources(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(observabilityDir, "grafana", "provisioning", "datasources", "datasources.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		APIVersion  int `json:"apiVersion"`
		Datasources []struct {
			Name      string `json:"name"`
			UID       string `json:"uid"`
			Type      string `json:"type"`
			Access    string `json:"access"`
			URL       string `json:"url"`
			IsDefault bool   `json:"isDefault"`
			JSONData  struct {
				Exemplars []struct {
					Name          string `json:"name"`
					DatasourceUID string `json:"datasourceUid"`
				} `json:"exemplarTraceIdDestinations"`
				TracesToMetrics map[string]any `json:"tracesToMetrics"`
				ServiceMap      map[string]any `json:"serviceMap"`
				NodeGraph       map[string]any `json:"nodeGraph"`
			} `json:"jsonData"`
		} `json:"datasources"`
	}
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("datasources.yaml: %v", err)
	}
	byUID := map[string]string{}
	for _, ds := range cfg.Datasources {
		byUID[ds.UID] = ds.Type
		if ds.Type == "prometheus" {
			if len(ds.JSONData.Exemplars) != 1 || ds.JSONData.Exemplars[0].Name != "trace_id" || ds.JSONData.Exemplars[0].DatasourceUID != "tempo" {
				t.Errorf("Prometheus exemplar destinations %+v; want trace_id → tempo", ds.JSONData.Exemplars)
			}
		}
	}
	if byUID["prometheus"] != "prometheus" || byUID["tempo"] != "tempo" {
		t.Errorf("provisioned data sources %v; want uid prometheus (prometheus) and uid tempo (tempo)", byUID)
	}
	loadDashboard(t)
}
