package deploy_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// helmEnv names the helm binary the chart tests run; without it they look
// for helm on PATH (.ci/run builds one from .ci/tools/helm and puts it there).
const helmEnv = "LEASEGATE_HELM"

// helmRelease is the release name the tests render: `helm install leasegate`
// names the gateway's objects as the kustomize base does.
const helmRelease = "leasegate"

func chartDir() string { return filepath.Join(repoRoot, "deploy", "helm", "leasegate") }

// helmBinary returns the helm to run. Without one the test skips, except
// under CI=true, where it fails: CI must not pass without the chart checked.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(helmEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	msg := "no helm on PATH and $" + helmEnv + " unset; .ci/run builds one: " +
		"(cd .ci/tools/helm && go build -o ../../bin/helm helm.sh/helm/v4/cmd/helm) and puts .ci/bin on PATH"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg + " (skipping the chart; under CI=true this fails)")
	return ""
}

// statChart reads every file of the chart: go test caches a passing result
// on the files the test process itself touched, and helm reads the chart in
// a process of its own.
func statChart(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir(chartDir(), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			_, err = os.ReadFile(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runHelm runs helm with args in the chart's directory and returns its
// standard output, and its standard error on failure.
func runHelm(t *testing.T, args ...string) (stdout []byte, stderr string, err error) {
	t.Helper()
	statChart(t)
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Dir = chartDir()
	// No repositories, plugins or caches of the machine's user.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.Bytes(), errb.String(), err
}

// helmValuesArgs are the -f arguments for a file of the chart's ci/ directory.
func helmValuesArgs(values string) []string {
	if values == "" {
		return nil
	}
	return []string{"-f", filepath.Join("ci", values)}
}

// helmSource renders the chart with ci/VALUES ("" = the defaults).
func helmSource(name, values string, monitoring bool, etcdSets int, external ...string) *manifestSource {
	return &manifestSource{
		name: name, monitoring: monitoring, etcdSets: etcdSets, external: external,
		load: func(t *testing.T) []namedDoc {
			t.Helper()
			args := append([]string{"template", helmRelease, ".", "--namespace", k8sNamespace}, helmValuesArgs(values)...)
			out, stderr, err := runHelm(t, args...)
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "rendered.yaml")
			if err := os.WriteFile(path, out, 0o600); err != nil {
				t.Fatal(err)
			}
			docs, err := yamlDocs(path)
			if err != nil {
				t.Fatalf("helm template output: %v", err)
			}
			var named []namedDoc
			for _, doc := range docs {
				named = append(named, namedDoc{helmDocSource(doc), doc})
			}
			return named
		},
	}
}

// helmDocSource is the "# Source: leasegate/templates/…" line helm puts
// above each document.
func helmDocSource(doc []byte) string {
	for _, line := range strings.Split(string(doc), "\n") {
		if s, ok := strings.CutPrefix(line, "# Source: "); ok {
			return s
		}
	}
	return "a rendered document"
}

// TestHelmChartLint: `helm lint --strict` passes with the defaults and with
// each values file of ci/.
func TestHelmChartLint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir(), "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci/*-values.yaml in the chart (%v)", err)
	}
	for _, values := range append([]string{""}, files...) {
		if values != "" {
			values = filepath.Base(values)
		}
		t.Run("values="+values, func(t *testing.T) {
			args := append([]string{"lint", "--strict", "."}, helmValuesArgs(values)...)
			out, stderr, err := runHelm(t, args...)
			if err != nil {
				t.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
			}
		})
	}
}

// TestHelmChartSchema: values.schema.json refuses a wrong type and an
// unknown top-level key, naming the key, at lint and at render time.
func TestHelmChartSchema(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"replicas=three", "/replicas': got string, want integer"},
		{"replcas=3", "additional properties 'replcas' not allowed"},
		{"tls.enabled=yes", "/tls/enabled': got string, want boolean"},
		{"shards[0].endpoints[0]=etcd-a:2379", "/shards/0/endpoints/0"},
		{"config.etcd=x=http://a:2379", "/config/etcd'"},
	} {
		for _, cmd := range []string{"lint", "template"} {
			args := []string{cmd, helmRelease, ".", "--set-string", c.set}
			if cmd == "lint" {
				args = []string{cmd, "--strict", ".", "--set-string", c.set}
			}
			if strings.HasPrefix(c.set, "replicas=") || strings.HasPrefix(c.set, "replcas=") {
				args[len(args)-2] = "--set" // a number where the schema wants one
			}
			out, stderr, err := runHelm(t, args...)
			if err == nil {
				t.Errorf("helm %s succeeded, want the schema to refuse it", strings.Join(args, " "))
				continue
			}
			if msg := string(out) + stderr; !strings.Contains(msg, c.want) {
				t.Errorf("helm %s: the error does not say %q:\n%s", strings.Join(args, " "), c.want, msg)
			}
		}
	}
}

// TestHelmChartObjects: with every option on the chart renders the objects
// the kustomize base has (kind and name), and its defaults the base's
// minus the Namespace and the Prometheus Operator's kinds.
func TestHelmChartObjects(t *testing.T) {
	base := objectNames(t, kustomizeSource)
	for _, c := range []struct {
		src  *manifestSource
		drop []string
	}{
		{helmSource("helm-full", "full-values.yaml", true, 3), nil},
		{helmSource("helm-defaults", "", false, 3), []string{"Namespace", "ServiceMonitor", "PrometheusRule"}},
	} {
		var want []string
		for _, o := range base {
			if kind, _, _ := strings.Cut(o, " "); !slices.Contains(c.drop, kind) {
				want = append(want, o)
			}
		}
		if got := objectNames(t, c.src); !slices.Equal(got, want) {
			t.Errorf("%s renders\n  %q\nwant the kustomize base's\n  %q", c.src.name, got, want)
		}
	}
}

// objectNames are "Kind name" of every document of src, sorted.
func objectNames(t *testing.T, src *manifestSource) []string {
	t.Helper()
	var out []string
	for _, d := range src.load(t) {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(d.doc, &o); err != nil {
			t.Fatalf("%s: %s: %v", src.name, d.where, err)
		}
		out = append(out, o.Kind+" "+o.Metadata.Name)
	}
	sort.Strings(out)
	return out
}

// TestKubernetesImage: the gateway's image is a registry path, never the
// local leasegate:dev, and the base's images: override pins the chart's
// appVersion, so both install the same release.
func TestKubernetesImage(t *testing.T) {
	m := loadManifests(t)
	_, c := m.gateway(t)
	if !strings.Contains(c.Image, "/") || strings.Contains(c.Image, "leasegate:dev") {
		t.Errorf("Deployment leasegate: image %q, want a registry path (ghcr.io/…)", c.Image)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	b, err := os.ReadFile(filepath.Join(chartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	name := imageName(c.Image)
	if tag := strings.TrimPrefix(c.Image, name+":"); tag != chart.AppVersion {
		t.Errorf("Deployment leasegate: image %q, want tag %q (the chart's appVersion)", c.Image, chart.AppVersion)
	}
	i := slices.IndexFunc(m.kust.Images, func(img kustomizationImage) bool { return img.Name == name })
	if i < 0 {
		t.Fatalf("kustomization.yaml: no images: entry for %s", name)
	}
	if got := m.kust.Images[i].NewTag; got != chart.AppVersion {
		t.Errorf("kustomization.yaml images: %s newTag %q, want the chart's appVersion %q", name, got, chart.AppVersion)
	}
}
