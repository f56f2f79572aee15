package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// externalSecrets are the Secrets the base mounts but does not ship:
// operators create them (docs/operations.md says how).
var externalSecrets = []string{"leasegate-auth", "leasegate-tls", "leasegate-etcd-tls"}

// kustomization is the subset of kustomize's Kustomization the base uses;
// decoding it strictly catches a misspelt or unsupported field.
type kustomization struct {
	APIVersion string               `json:"apiVersion"`
	Kind       string               `json:"kind"`
	Namespace  string               `json:"namespace"`
	Resources  []string             `json:"resources"`
	Images     []kustomizationImage `json:"images"`
}

// kustomizationImage is one entry of a Kustomization's images: list.
type kustomizationImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
}

// workload is a Deployment or StatefulSet, seen through what the checks need.
type workload struct {
	kind, name string
	replicas   int32
	selector   *metav1.LabelSelector
	pod        corev1.PodTemplateSpec
	claims     []corev1.PersistentVolumeClaim
	service    string // a StatefulSet's serviceName
}

// manifests is every object of one source, decoded into its API type.
type manifests struct {
	source     *manifestSource
	kust       kustomization // the kustomize base's only (loadManifests)
	workloads  []workload
	services   []*corev1.Service
	configMaps map[string]*corev1.ConfigMap
	pdbs       []*policyv1.PodDisruptionBudget
	hpas       []*autoscalingv2.HorizontalPodAutoscaler
	netpols    []*networkingv1.NetworkPolicy
	monitors   []*monitoringv1.ServiceMonitor
	rules      []*monitoringv1.PrometheusRule
	namespaces []*corev1.Namespace
}

func k8sDir() string { return filepath.Join(repoRoot, "deploy", "kubernetes") }

// manifestSource is one way of producing leasegate's Kubernetes objects: the
// kustomize base, or the Helm chart with one set of values. Every check in
// kubernetes_test.go, alerts_test.go and dashboards_test.go runs on each
// source (eachManifests), so the two cannot drift apart.
type manifestSource struct {
	name string
	// load returns the source's YAML documents, each named for messages.
	load func(t *testing.T) []namedDoc
	// external are the shards the gateway dials that the source does not
	// run: no StatefulSet of theirs is expected.
	external []string
	// monitoring: the source renders ServiceMonitors and a PrometheusRule
	// (the chart's defaults leave them off: they need the operator's CRDs).
	monitoring bool
	// etcdSets is how many etcd StatefulSets the source runs.
	etcdSets int
}

// namedDoc is one YAML document and where it came from.
type namedDoc struct {
	where string
	doc   []byte
}

// k8sNamespace is the namespace every source deploys into: the base's
// kustomization namespace, the chart's release namespace.
const k8sNamespace = "leasegate"

// kustomizeSource reads the base's resource files in kustomization order.
var kustomizeSource = &manifestSource{
	name:       "kustomize",
	monitoring: true,
	etcdSets:   3,
	load: func(t *testing.T) []namedDoc {
		t.Helper()
		k := readKustomization(t)
		var out []namedDoc
		for _, res := range k.Resources {
			docs, err := yamlDocs(filepath.Join(k8sDir(), res))
			if err != nil {
				t.Fatalf("%s: %v", res, err)
			}
			for i, doc := range docs {
				out = append(out, namedDoc{fmt.Sprintf("%s, document %d", res, i+1), doc})
			}
		}
		return out
	},
}

// manifestSources are the kustomize base and the chart with its default
// values, with every option on (ci/full-values.yaml), and with only external
// shards over TLS (ci/external-values.yaml).
func manifestSources() []*manifestSource {
	return []*manifestSource{
		kustomizeSource,
		helmSource("helm-defaults", "", false, 3),
		helmSource("helm-full", "full-values.yaml", true, 3, "etcd-d"),
		helmSource("helm-external", "external-values.yaml", true, 0, "etcd-a", "etcd-b"),
	}
}

// eachManifests runs check on every source's objects, one subtest each.
func eachManifests(t *testing.T, check func(t *testing.T, m *manifests)) {
	t.Helper()
	for _, src := range manifestSources() {
		t.Run(src.name, func(t *testing.T) { check(t, loadSource(t, src)) })
	}
}

func readKustomization(t *testing.T) kustomization {
	t.Helper()
	var k kustomization
	b, err := os.ReadFile(filepath.Join(k8sDir(), "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.Namespace != k8sNamespace {
		t.Fatalf("kustomization.yaml: namespace %q, want %q", k.Namespace, k8sNamespace)
	}
	return k
}

// loadManifests decodes the kustomize base (see loadSource).
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := loadSource(t, kustomizeSource)
	m.kust = readKustomization(t)
	return m
}

// loadSource decodes every document of src strictly: an unknown or
// duplicate field, a wrong type or an unknown kind fails.
func loadSource(t *testing.T, src *manifestSource) *manifests {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme,
		networkingv1.AddToScheme, monitoringv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

	m := &manifests{source: src, configMaps: map[string]*corev1.ConfigMap{}}
	for _, d := range src.load(t) {
		obj, gvk, err := dec.Decode(d.doc, nil, nil)
		if err != nil {
			t.Errorf("%s: %s: %v", src.name, d.where, err)
			continue
		}
		if err := m.add(obj); err != nil {
			t.Errorf("%s: %s (%s): %v", src.name, d.where, gvk.Kind, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

// yamlDocs splits a multi-document YAML file, dropping empty documents.
func yamlDocs(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if s := strings.TrimSpace(string(js)); s != "null" && s != "" {
			out = append(out, doc)
		}
	}
}

func (m *manifests) add(obj runtime.Object) error {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		m.workloads = append(m.workloads, workload{kind: "Deployment", name: o.Name, replicas: ptrOr(o.Spec.Replicas, 1), selector: o.Spec.Selector, pod: o.Spec.Template})
	case *appsv1.StatefulSet:
		m.workloads = append(m.workloads, workload{kind: "StatefulSet", name: o.Name, replicas: ptrOr(o.Spec.Replicas, 1), selector: o.Spec.Selector, pod: o.Spec.Template, claims: o.Spec.VolumeClaimTemplates, service: o.Spec.ServiceName})
		if o.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			return fmt.Errorf("StatefulSet %s: podManagementPolicy %q; etcd members must start together (Parallel)", o.Name, o.Spec.PodManagementPolicy)
		}
	case *corev1.Service:
		m.services = append(m.services, o)
	case *corev1.ConfigMap:
		m.configMaps[o.Name] = o
	case *policyv1.PodDisruptionBudget:
		m.pdbs = append(m.pdbs, o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		m.hpas = append(m.hpas, o)
	case *networkingv1.NetworkPolicy:
		m.netpols = append(m.netpols, o)
	case *monitoringv1.ServiceMonitor:
		m.monitors = append(m.monitors, o)
	case *monitoringv1.PrometheusRule:
		m.rules = append(m.rules, o)
	case *corev1.Namespace:
		m.namespaces = append(m.namespaces, o)
	case *corev1.ServiceAccount:
	default:
		return fmt.Errorf("unexpected kind %T", obj)
	}
	if mo, ok := obj.(metav1.Object); ok {
		if _, isNS := obj.(*corev1.Namespace); !isNS && mo.GetNamespace() != k8sNamespace {
			return fmt.Errorf("%s: namespace %q, want %q", mo.GetName(), mo.GetNamespace(), k8sNamespace)
		}
	}
	return nil
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// selects reports whether sel matches labels l.
func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(l))
}

func (m *manifests) workload(name string) *workload {
	for i := range m.workloads {
		if m.workloads[i].name == name {
			return &m.workloads[i]
		}
	}
	return nil
}

// selected are the workloads whose pods sel matches.
func (m *manifests) selected(t *testing.T, sel *metav1.LabelSelector) []*workload {
	t.Helper()
	var out []*workload
	for i := range m.workloads {
		if selects(t, sel, m.workloads[i].pod.Labels) {
			out = append(out, &m.workloads[i])
		}
	}
	return out
}

// containerPort resolves a port reference (name or number) in w's pods.
func (w *workload) containerPort(p intstr.IntOrString) (int32, bool) {
	for _, c := range w.pod.Spec.Containers {
		for _, cp := range c.Ports {
			if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

func probePort(p *corev1.Probe) (intstr.IntOrString, bool) {
	switch {
	case p == nil:
		return intstr.IntOrString{}, false
	case p.HTTPGet != nil:
		return p.HTTPGet.Port, true
	case p.TCPSocket != nil:
		return p.TCPSocket.Port, true
	case p.GRPC != nil:
		return intstr.FromInt32(p.GRPC.Port), true
	}
	return intstr.IntOrString{}, false
}

// mountedConfigMapFile returns the content of path if it is a key of a
// ConfigMap mounted into c.
func (m *manifests) mountedConfigMapFile(w *workload, c corev1.Container, path string) (string, bool) {
	for _, vm := range c.VolumeMounts {
		key, ok := strings.CutPrefix(path, vm.MountPath+"/")
		if !ok {
			continue
		}
		for _, v := range w.pod.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				if cm := m.configMaps[v.ConfigMap.Name]; cm != nil {
					data, ok := cm.Data[key]
					return data, ok
				}
			}
		}
	}
	return "", false
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// flagValue is the value of --name=value in args, "" if absent.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func stringList(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, i := range x {
			out = append(out, fmt.Sprint(i))
		}
		return out
	}
	return nil
}

// parseDuration returns a Go duration string in seconds.
func parseDuration(s string) (float64, error) {
	d, err := time.ParseDuration(s)
	return d.Seconds(), err
}

// readDoc returns docs/<name>.
func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
