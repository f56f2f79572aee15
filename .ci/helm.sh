#!/usr/bin/env bash
# Builds helm from the version .ci/tools/helm/go.mod pins into .ci/bin/helm
# (gitignored) and puts .ci/bin on PATH, for deploy/helm_test.go and the
# lint below. Rebuilds only when the binary is missing or was built from
# another helm version, so a second run costs one `go version -m`.
#
# Usage: source .ci/helm.sh    (from the repository's root)
set -euo pipefail

leasegate_helm_dir="$(pwd)/.ci/bin"
leasegate_helm_version="$(cd .ci/tools/helm && GOWORK=off go list -m -f '{{.Version}}' helm.sh/helm/v4)"
if ! go version -m "$leasegate_helm_dir/helm" 2>/dev/null |
  awk -v ver="$leasegate_helm_version" '$1 == "dep" && $2 == "helm.sh/helm/v4" && $3 == ver { found = 1 } $1 == "mod" && $2 == "helm.sh/helm/v4" && $3 == ver { found = 1 } END { exit !found }'; then
  leasegate_helm_start=$SECONDS
  (cd .ci/tools/helm && GOWORK=off CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$leasegate_helm_version" \
    -o "$leasegate_helm_dir/helm" helm.sh/helm/v4/cmd/helm)
  echo "built helm $leasegate_helm_version in $((SECONDS - leasegate_helm_start)) s"
fi
export PATH="$leasegate_helm_dir:$PATH"
