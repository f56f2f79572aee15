package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

func TestKubernetesKustomization(t *testing.T) {
	m := loadManifests(t)
	k := m.kust
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind)
	}
	files, err := filepath.Glob(filepath.Join(k8sDir(), "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Clone(k.Resources)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml resources %q, want every manifest in the directory: %q", got, want)
	}
	if len(m.namespaces) != 1 || m.namespaces[0].Name != k.Namespace {
		t.Errorf("want exactly one Namespace, %q", k.Namespace)
	}
	for _, img := range k.Images {
		found := false
		for _, w := range m.workloads {
			for _, c := range w.pod.Spec.Containers {
				found = found || imageName(c.Image) == img.Name
			}
		}
		if !found {
			t.Errorf("kustomization.yaml images: no container uses image %q", img.Name)
		}
	}
}

func TestKubernetesWorkloads(t *testing.T) {
	eachManifests(t, func(t *testing.T, m *manifests) {
		ops := readDoc(t, "operations.md")
		for _, w := range m.workloads {
			what := w.kind + " " + w.name
			if !selects(t, w.selector, w.pod.Labels) {
				t.Errorf("%s: selector %v does not match its pod labels %v", what, w.selector.MatchLabels, w.pod.Labels)
			}
			psc := w.pod.Spec.SecurityContext
			if psc == nil || !ptrOr(psc.RunAsNonRoot, false) {
				t.Errorf("%s: pods must set runAsNonRoot (the namespace enforces the restricted profile)", what)
			}
			volumes := map[string]corev1.Volume{}
			for _, v := range w.pod.Spec.Volumes {
				volumes[v.Name] = v
				switch {
				case v.ConfigMap != nil:
					if m.configMaps[v.ConfigMap.Name] == nil {
						t.Errorf("%s: volume %s uses ConfigMap %q, which the base does not define", what, v.Name, v.ConfigMap.Name)
					}
				case v.Secret != nil:
					if !slices.Contains(externalSecrets, v.Secret.SecretName) {
						t.Errorf("%s: volume %s uses Secret %q; add it to externalSecrets and to docs/operations.md", what, v.Name, v.Secret.SecretName)
					}
					if !strings.Contains(ops, v.Secret.SecretName) {
						t.Errorf("%s: Secret %q is not explained in docs/operations.md", what, v.Secret.SecretName)
					}
				}
			}
			for _, c := range w.claims {
				volumes[c.Name] = corev1.Volume{Name: c.Name}
			}
			for _, c := range w.pod.Spec.Containers {
				cw := what + " container " + c.Name
				for _, vm := range c.VolumeMounts {
					if _, ok := volumes[vm.Name]; !ok {
						t.Errorf("%s: mounts volume %q, which the pod does not have", cw, vm.Name)
					}
				}
				for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
					port, ok := probePort(p)
					if !ok {
						t.Errorf("%s: no %s probe", cw, name)
						continue
					}
					if _, ok := w.containerPort(port); !ok {
						t.Errorf("%s: %s probe port %s is not a container port", cw, name, port.String())
					}
				}
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("%s: want CPU and memory requests and a memory limit", cw)
				}
				sc := c.SecurityContext
				if sc == nil || ptrOr(sc.AllowPrivilegeEscalation, true) || !ptrOr(sc.ReadOnlyRootFilesystem, false) {
					t.Errorf("%s: want allowPrivilegeEscalation false and a read-only root filesystem", cw)
				}
			}
			if !slices.ContainsFunc(m.pdbs, func(p *policyv1.PodDisruptionBudget) bool { return selects(t, p.Spec.Selector, w.pod.Labels) }) {
				t.Errorf("%s: no PodDisruptionBudget selects its pods", what)
			}
		}
		for _, p := range m.pdbs {
			if len(m.selected(t, p.Spec.Selector)) != 1 {
				t.Errorf("PodDisruptionBudget %s selects %d workloads, want 1", p.Name, len(m.selected(t, p.Spec.Selector)))
			}
			if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PodDisruptionBudget %s: want maxUnavailable 1", p.Name)
			}
		}
	})
}

func TestKubernetesServices(t *testing.T) {
	eachManifests(t, func(t *testing.T, m *manifests) {
		for _, s := range m.services {
			ws := m.selected(t, &metav1.LabelSelector{MatchLabels: s.Spec.Selector})
			if len(ws) != 1 {
				t.Errorf("Service %s selects %d workloads, want 1", s.Name, len(ws))
				continue
			}
			for _, p := range s.Spec.Ports {
				cp, ok := ws[0].containerPort(p.TargetPort)
				if !ok {
					t.Errorf("Service %s port %s: targetPort %s is not a port of %s", s.Name, p.Name, p.TargetPort.String(), ws[0].name)
					continue
				}
				if cp != p.Port {
					t.Errorf("Service %s port %s: port %d but container port %d; keep them equal", s.Name, p.Name, p.Port, cp)
				}
			}
		}
		for _, w := range m.workloads {
			if w.kind != "StatefulSet" {
				continue
			}
			i := slices.IndexFunc(m.services, func(s *corev1.Service) bool { return s.Name == w.service })
			if i < 0 || m.services[i].Spec.ClusterIP != corev1.ClusterIPNone || !m.services[i].Spec.PublishNotReadyAddresses {
				t.Errorf("StatefulSet %s: serviceName %q must be a headless Service that publishes not-ready addresses", w.name, w.service)
			}
		}
	})
}

// imageName is an image reference without its tag or digest, the name a
// kustomize images: entry matches.
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i]
	}
	return ref
}

// etcdSets are the StatefulSets running etcd, by name.
func (m *manifests) etcdSets() []*workload {
	var out []*workload
	for i := range m.workloads {
		if m.workloads[i].kind == "StatefulSet" && m.workloads[i].pod.Labels["app.kubernetes.io/name"] == "etcd" {
			out = append(out, &m.workloads[i])
		}
	}
	return out
}

func TestKubernetesEtcd(t *testing.T) {
	eachManifests(t, func(t *testing.T, m *manifests) {
		sets := m.etcdSets()
		if len(sets) != m.source.etcdSets {
			t.Fatalf("%d etcd StatefulSets, want one per shard the source runs, %d", len(sets), m.source.etcdSets)
		}
		for _, w := range sets {
			what := "StatefulSet " + w.name
			if w.replicas != 3 {
				t.Errorf("%s: %d members, want 3", what, w.replicas)
			}
			aff := w.pod.Spec.Affinity
			if aff == nil || aff.PodAntiAffinity == nil || !slices.ContainsFunc(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, func(term corev1.PodAffinityTerm) bool {
				return term.TopologyKey == "kubernetes.io/hostname" && selects(t, term.LabelSelector, w.pod.Labels)
			}) {
				t.Errorf("%s: want required pod anti-affinity on kubernetes.io/hostname against its own members", what)
			}
			if len(w.claims) == 0 {
				t.Errorf("%s: no volumeClaimTemplates", what)
			}
			c := w.pod.Spec.Containers[0]
			checkEtcdImage(t, what, c.Image)
			for name, want := range map[string]string{"client": etcdClientPort, "peer": etcdPeerPort, "metrics": etcdMetricsPort} {
				if p, ok := w.containerPort(intstr.FromString(name)); !ok || strconv.Itoa(int(p)) != want {
					t.Errorf("%s: container port %q is %d, want %s", what, name, p, want)
				}
			}
			var members []string
			for i := range int(w.replicas) {
				members = append(members, fmt.Sprintf("%s-%d", w.name, i))
			}
			host := func(member string) string { return member + "." + w.service }
			for _, member := range members {
				args := slices.Clone(c.Args)
				for i := range args {
					args[i] = strings.ReplaceAll(args[i], "$(POD_NAME)", member)
				}
				checkEtcdMember(t, what+" member "+member, w.name, member, members, host, args)
			}
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
			}) {
				t.Errorf("%s: the arguments use $(POD_NAME); set it from metadata.name", what)
			}
		}
	})
}

// gateway returns the gateway Deployment and its container.
func (m *manifests) gateway(t *testing.T) (*workload, corev1.Container) {
	t.Helper()
	w := m.workload("leasegate")
	if w == nil || w.kind != "Deployment" || len(w.pod.Spec.Containers) != 1 {
		t.Fatal("want Deployment leasegate with one container")
	}
	return w, w.pod.Spec.Containers[0]
}

func TestKubernetesGateway(t *testing.T) {
	eachManifests(t, func(t *testing.T, m *manifests) {
		w, c := m.gateway(t)
		if w.replicas < 3 {
			t.Errorf("Deployment leasegate: %d replicas, want at least 3", w.replicas)
		}

		// Flags and environment variables exist.
		checkFlagArgs(t, "Deployment leasegate args", c.Args)
		if len(c.Command) > 0 {
			t.Errorf("Deployment leasegate: command %q replaces the image's entrypoint; use args", c.Command)
		}
		var envNames []string
		env := []string{}
		for _, e := range c.Env {
			envNames = append(envNames, e.Name)
			if strings.HasPrefix(e.Name, "LEASEGATE_") {
				v := e.Value
				if e.ValueFrom != nil {
					v = "from-a-secret"
				}
				env = append(env, e.Name+"="+v)
			}
		}
		checkEnv(t, "Deployment leasegate env", envNames)

		// The config file is mounted where LEASEGATE_CONFIG points, and its keys are flags.
		cfgPath := envValue(c.Env, "LEASEGATE_CONFIG")
		cfgData, ok := m.mountedConfigMapFile(w, c, cfgPath)
		if !ok {
			t.Fatalf("LEASEGATE_CONFIG=%q is not a file of a mounted ConfigMap", cfgPath)
		}
		var cfg map[string]any
		if err := yaml.UnmarshalStrict([]byte(cfgData), &cfg); err != nil {
			t.Fatalf("config file %s: %v", cfgPath, err)
		}
		for k := range cfg {
			if _, ok := helpFlags[k]; !ok {
				t.Errorf("config file %s: key %q is not a leasegate flag", cfgPath, k)
			}
		}

		// The whole configuration — args, env and file — passes leasegate's own validation.
		tmp := filepath.Join(t.TempDir(), "leasegate.yaml")
		if err := os.WriteFile(tmp, []byte(cfgData), 0o600); err != nil {
			t.Fatal(err)
		}
		for i, e := range env {
			if strings.HasPrefix(e, "LEASEGATE_CONFIG=") {
				env[i] = "LEASEGATE_CONFIG=" + tmp
			}
		}
		checkValidConfig(t, "Deployment leasegate", env, c.Args...)

		// Files the configuration names are inside mounted volumes.
		var paths []string
		for k, v := range cfg {
			if k != "prefix" { // an etcd key prefix, not a file
				paths = append(paths, stringList(v)...)
			}
		}
		for _, a := range c.Args {
			_, v, _ := strings.Cut(a, "=")
			paths = append(paths, v)
		}
		for _, p := range paths {
			if strings.HasPrefix(p, "/") && !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return strings.HasPrefix(p, vm.MountPath+"/") }) {
				t.Errorf("Deployment leasegate: %s is not inside a mounted volume", p)
			}
		}

		// Ports: listen, container, probes, Services.
		listen := flagValue(c.Args, "listen")
		if listen == "" {
			listen, _ = cfg["listen"].(string)
		}
		if _, port, _ := strings.Cut(listen, ":"); port != gatewayPort {
			t.Errorf("Deployment leasegate: --listen=%q, want port %s", listen, gatewayPort)
		}
		if p, ok := w.containerPort(intstr.FromString("api")); !ok || strconv.Itoa(int(p)) != gatewayPort {
			t.Errorf("Deployment leasegate: container port api is %d, want %s", p, gatewayPort)
		}
		// kubelet's gRPC probe speaks plaintext only: with TLS on the port,
		// readiness is GET /healthz over HTTPS, and the Services drop h2c.
		tlsOn := cfg["tls-cert"] != nil || envValue(c.Env, "LEASEGATE_TLS_CERT") != ""
		switch rp := c.ReadinessProbe; {
		case rp == nil:
			t.Errorf("Deployment leasegate: no readiness probe")
		case tlsOn:
			if rp.HTTPGet == nil || rp.HTTPGet.Path != "/healthz" || rp.HTTPGet.Scheme != corev1.URISchemeHTTPS || rp.HTTPGet.Port != intstr.FromString("api") {
				t.Errorf("Deployment leasegate: with TLS on %s readiness must be an HTTPS GET /healthz on port api", gatewayPort)
			}
		case rp.GRPC == nil || strconv.Itoa(int(rp.GRPC.Port)) != gatewayPort:
			t.Errorf("Deployment leasegate: readiness must be the gRPC health check on port %s", gatewayPort)
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil && c.LivenessProbe.TCPSocket == nil {
			t.Errorf("Deployment leasegate: liveness must be GET /healthz or a TCP check")
		}
		for _, s := range m.services {
			if selects(t, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, w.pod.Labels) {
				for _, p := range s.Spec.Ports {
					if strconv.Itoa(int(p.Port)) != gatewayPort {
						t.Errorf("Service %s: port %d, want %s", s.Name, p.Port, gatewayPort)
					}
					if h2c := p.AppProtocol != nil && *p.AppProtocol == "kubernetes.io/h2c"; h2c == tlsOn {
						t.Errorf("Service %s: appProtocol %q with TLS %v; want kubernetes.io/h2c exactly when the port is plaintext", s.Name, ptrOr(p.AppProtocol, ""), tlsOn)
					}
				}
			}
		}
		grace := ptrOr(w.pod.Spec.TerminationGracePeriodSeconds, 30)
		shutdown := fmt.Sprint(cfg["shutdown-timeout"])
		if d, err := parseDuration(shutdown); err != nil || d+5 >= float64(grace) {
			t.Errorf("terminationGracePeriodSeconds %d must exceed the preStop sleep plus shutdown-timeout %s", grace, shutdown)
		}

		// The HorizontalPodAutoscaler scales this Deployment on CPU from 3.
		if len(m.hpas) != 1 {
			t.Fatalf("%d HorizontalPodAutoscalers, want 1", len(m.hpas))
		}
		h := m.hpas[0]
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != "leasegate" || ptrOr(h.Spec.MinReplicas, 1) < 3 || h.Spec.MaxReplicas < ptrOr(h.Spec.MinReplicas, 1) {
			t.Errorf("HorizontalPodAutoscaler %s: want Deployment leasegate, 3 ≤ min ≤ max", h.Name)
		}
		if !slices.ContainsFunc(h.Spec.Metrics, func(ms autoscalingv2.MetricSpec) bool {
			return ms.Resource != nil && ms.Resource.Name == corev1.ResourceCPU
		}) {
			t.Errorf("HorizontalPodAutoscaler %s: want a CPU resource metric", h.Name)
		}

		// --etcd names every etcd StatefulSet with every member on the client
		// port, and the source's external shards.
		var clusters []string
		for _, v := range stringList(cfg["etcd"]) {
			name, hosts, err := etcdClusterArg(v)
			if err != nil {
				t.Error(err)
				continue
			}
			if slices.Contains(clusters, name) {
				t.Errorf("--etcd %s: cluster %s is listed twice", v, name)
			}
			clusters = append(clusters, name)
			sts := m.workload(name)
			if slices.Contains(m.source.external, name) {
				if sts != nil {
					t.Errorf("--etcd %s: an external shard, but the source runs a %s %s", v, sts.kind, name)
				}
				continue
			}
			if sts == nil || sts.kind != "StatefulSet" {
				t.Errorf("--etcd %s: no etcd StatefulSet %s", v, name)
				continue
			}
			var want []string
			for i := range int(sts.replicas) {
				want = append(want, fmt.Sprintf("%s-%d.%s", name, i, sts.service))
			}
			if !slices.Equal(hosts, want) {
				t.Errorf("--etcd %s: hosts %q, want every member %q", name, hosts, want)
			}
		}
		for _, s := range m.etcdSets() {
			if !slices.Contains(clusters, s.name) {
				t.Errorf("etcd StatefulSet %s is not in the gateway's --etcd list %q", s.name, clusters)
			}
		}
		for _, e := range m.source.external {
			if !slices.Contains(clusters, e) {
				t.Errorf("external shard %s is not in the gateway's --etcd list %q", e, clusters)
			}
		}
	})
}

func TestKubernetesNetworkPolicies(t *testing.T) {
	eachManifests(t, func(t *testing.T, m *manifests) {
		gw, _ := m.gateway(t)
		var defaultDeny bool
		for _, np := range m.netpols {
			if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0 && len(np.Spec.Ingress) == 0 &&
				slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				defaultDeny = true
				continue
			}
			if len(m.selected(t, &np.Spec.PodSelector)) == 0 {
				t.Errorf("NetworkPolicy %s selects no pods", np.Name)
			}
		}
		if !defaultDeny {
			t.Error("want a default-deny ingress NetworkPolicy")
		}
		// allowed reports which workloads' pods may reach w on port.
		allowed := func(w *workload, port int) (from []string, anyone bool) {
			for _, np := range m.netpols {
				if !selects(t, &np.Spec.PodSelector, w.pod.Labels) {
					continue
				}
				for _, rule := range np.Spec.Ingress {
					if !slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.IntValue() == port }) && len(rule.Ports) > 0 {
						continue
					}
					if len(rule.From) == 0 {
						anyone = true
					}
					for _, peer := range rule.From {
						switch {
						case peer.PodSelector != nil && peer.NamespaceSelector == nil:
							for _, s := range m.selected(t, peer.PodSelector) {
								from = append(from, s.name)
							}
						case peer.NamespaceSelector != nil:
							from = append(from, "namespace "+metav1.FormatLabelSelector(peer.NamespaceSelector))
						default:
							anyone = true
						}
					}
				}
			}
			return from, anyone
		}
		if _, anyone := allowed(gw, 7070); !anyone {
			t.Errorf("clients cannot reach the gateways on %s", gatewayPort)
		}
		for _, e := range m.etcdSets() {
			client, anyone := allowed(e, 2379)
			if anyone || !slices.Equal(client, []string{"leasegate"}) {
				t.Errorf("etcd %s client port 2379 is open to %q (anyone: %v), want only the gateways", e.name, client, anyone)
			}
			peer, anyone := allowed(e, 2380)
			if anyone || !slices.Equal(peer, []string{e.name}) {
				t.Errorf("etcd %s peer port 2380 is open to %q (anyone: %v), want only its own members", e.name, peer, anyone)
			}
		}
	})
}

func TestKubernetesMonitoring(t *testing.T) {
	eachManifests(t, func(t *testing.T, m *manifests) {
		switch {
		case !m.source.monitoring && len(m.monitors)+len(m.rules) > 0:
			t.Fatalf("%d ServiceMonitors and %d PrometheusRules, want none (they need the Prometheus Operator's CRDs: opt-in)", len(m.monitors), len(m.rules))
		case !m.source.monitoring:
			return
		case len(m.monitors) == 0:
			t.Fatal("no ServiceMonitor")
		case len(m.rules) == 0:
			t.Fatal("no PrometheusRule")
		}
		gw, _ := m.gateway(t)
		var scrapesGateway bool
		for _, sm := range m.monitors {
			var svcs []*corev1.Service
			for _, s := range m.services {
				if selects(t, &sm.Spec.Selector, s.Labels) {
					svcs = append(svcs, s)
				}
			}
			if len(svcs) == 0 {
				t.Errorf("ServiceMonitor %s selects no Service", sm.Name)
			}
			for _, s := range svcs {
				if selects(t, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, gw.pod.Labels) {
					scrapesGateway = true
				}
				for _, ep := range sm.Spec.Endpoints {
					if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
						t.Errorf("ServiceMonitor %s: Service %s has no port named %q", sm.Name, s.Name, ep.Port)
					}
				}
			}
			if len(svcs) > 1 && slices.ContainsFunc(svcs, func(s *corev1.Service) bool { return s.Name == "leasegate-headless" }) {
				t.Errorf("ServiceMonitor %s scrapes the gateways twice (leasegate and leasegate-headless)", sm.Name)
			}
		}
		if !scrapesGateway {
			t.Error("no ServiceMonitor scrapes the gateways")
		}
		for _, r := range m.rules {
			for _, g := range r.Spec.Groups {
				for _, rule := range g.Rules {
					if rule.Alert == "" || rule.Expr.String() == "" || rule.Labels["severity"] == "" || rule.Annotations["summary"] == "" {
						t.Errorf("PrometheusRule %s group %s: rule %q needs alert, expr, a severity label and a summary", r.Name, g.Name, rule.Alert)
					}
				}
			}
		}
	})
}
