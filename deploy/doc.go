// Package deploy holds leasegate's deployment files, not code: the local
// stack (compose/), the Kubernetes base (kubernetes/), the Helm chart
// (helm/leasegate/), and the tests that hold them to the real APIs and to
// leasegate's real flags. The chart's rendered objects (defaults, and each
// values file of its ci/ directory) go through the same checks as the
// base's; they need a helm binary (.ci/helm.sh builds one), and skip
// without it except under CI=true.
//
// The tests (package deploy_test) build the binaries with .ci/build, the
// Dockerfile's build command, and then check that every Kubernetes manifest
// decodes strictly into the Kubernetes API types, that the compose file
// loads with the compose-spec library, that every flag, environment
// variable, name and port the files use exists and agrees across them, and
// that docs/configuration.md lists exactly the flags of `leasegate --help`;
// that the Grafana dashboards and the alert rules use only metrics the
// gateway exports (deploy/observability/exported-metrics.txt); and that a
// build stamped with VERSION and REVISION reports them.
// Run `go test ./deploy -run TestConfigurationDoc -update` to regenerate
// that table after adding a flag, then fill in its allowed values, and
// `go test ./deploy -run TestKubernetesDashboard -update` to regenerate the
// dashboard ConfigMap after editing the dashboard.
package deploy
