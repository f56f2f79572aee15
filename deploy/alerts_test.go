package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// requiredAlerts are the alerts on leasegate's own metrics the base must
// ship.
var requiredAlerts = []string{"LeasegateBreakerOpen", "LeasegateLeaseLosses", "LeasegateWaitersStuck"}

// TestKubernetesAlertRules: every leasegate metric an alert expression
// names is exported, the required alerts exist, the expressions' brackets
// balance, and docs/operations.md's alert table lists exactly the alerts
// the PrometheusRule defines.
func TestKubernetesAlertRules(t *testing.T) {
	exported := exportedSamples(t)
	baseRules := loadManifests(t).rules
	eachManifests(t, func(t *testing.T, m *manifests) {
		if !m.source.monitoring {
			return // TestKubernetesMonitoring holds it to no PrometheusRule
		}
		// Rendered into namespace leasegate for release leasegate, the
		// chart's rules are the base's, field for field.
		if m.source != kustomizeSource {
			if got, want := alertRules(m.rules), alertRules(baseRules); !reflect.DeepEqual(got, want) {
				t.Errorf("the PrometheusRule differs from deploy/kubernetes/monitoring.yaml's:\n got %+v\nwant %+v", got, want)
			}
		}
		alerts := map[string]bool{}
		for _, r := range m.rules {
			for _, g := range r.Spec.Groups {
				for _, rule := range g.Rules {
					expr := rule.Expr.String()
					alerts[rule.Alert] = true
					for _, name := range leasegateMetric.FindAllString(expr, -1) {
						if !exported[name] {
							t.Errorf("alert %s uses %s, which the gateway does not export (%s)", rule.Alert, name, exportedMetricsList)
						}
					}
					if err := balanced(expr); err != nil {
						t.Errorf("alert %s: %v in %q", rule.Alert, err, expr)
					}
				}
			}
		}
		for _, a := range requiredAlerts {
			if !alerts[a] {
				t.Errorf("PrometheusRule has no alert %s", a)
			}
		}
		doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
		if err != nil {
			t.Fatal(err)
		}
		section := string(doc)
		i := strings.Index(section, "## Alerts worth having")
		if i < 0 {
			t.Fatal("docs/operations.md: no section \"Alerts worth having\"")
		}
		section = section[i:]
		if j := strings.Index(section[3:], "\n## "); j >= 0 {
			section = section[:j+3]
		}
		documented := map[string]bool{}
		for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z][A-Za-z]+)`").FindAllStringSubmatch(section, -1) {
			documented[m[1]] = true
		}
		for _, m := range regexp.MustCompile("(?m)^\\| `[A-Z][A-Za-z]+`, `([A-Z][A-Za-z]+)`").FindAllStringSubmatch(section, -1) {
			documented[m[1]] = true
		}
		for a := range alerts {
			if !documented[a] {
				t.Errorf("docs/operations.md, Alerts worth having: alert %s is not in the table", a)
			}
		}
		for a := range documented {
			if !alerts[a] {
				t.Errorf("docs/operations.md, Alerts worth having: %s is in the table but not in the PrometheusRule", a)
			}
		}
	})
}

// alertRules are the rules of rs in order, without the objects' metadata.
func alertRules(rs []*monitoringv1.PrometheusRule) []monitoringv1.Rule {
	var out []monitoringv1.Rule
	for _, r := range rs {
		for _, g := range r.Spec.Groups {
			out = append(out, g.Rules...)
		}
	}
	return out
}

// balanced reports unbalanced (), {} or [] outside string literals.
func balanced(expr string) error {
	var stack []rune
	pair := map[rune]rune{')': '(', '}': '{', ']': '['}
	var quote rune
	for _, r := range expr {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'' || r == '`':
			quote = r
		case r == '(' || r == '{' || r == '[':
			stack = append(stack, r)
		case pair[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pair[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 || quote != 0 {
		return fmt.Errorf("unclosed %q", stack)
	}
	return nil
}
