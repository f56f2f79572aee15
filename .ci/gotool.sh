#!/usr/bin/env bash
# Defines leasegate_gotool, which builds a Go tool pinned in one of the
# tools modules under .ci/tools/ into .ci/bin/ (gitignored) and puts .ci/bin
# on PATH, as .ci/helm.sh does for helm. A tool is rebuilt only when its
# binary is missing or was built from another version of the tool's module,
# so a second run costs one `go version -m` per tool; a first run in a new
# checkout with a warm build cache only links.
#
# Usage (from the repository's root):
#   source .ci/gotool.sh
#   leasegate_gotool TOOLS_DIR MODULE PACKAGE [BINARY]
# builds PACKAGE, of MODULE at the version TOOLS_DIR/go.mod selects, into
# .ci/bin/BINARY (default: the last element of PACKAGE).
set -euo pipefail

leasegate_gotool_dir="$(pwd)/.ci/bin"

leasegate_gotool() {
  local tools="$1" mod="$2" pkg="$3" name="${4:-${3##*/}}"
  local bin="$leasegate_gotool_dir/$name"
  local ver start
  ver="$(cd "$tools" && GOWORK=off go list -m -f '{{.Version}}' "$mod")"
  if ! go version -m "$bin" 2>/dev/null |
    awk -v mod="$mod" -v ver="$ver" '($1 == "dep" || $1 == "mod") && $2 == mod && $3 == ver { found = 1 } END { exit !found }'; then
    start=$SECONDS
    mkdir -p "$leasegate_gotool_dir"
    (cd "$tools" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$bin" "$pkg")
    echo "built $name ($mod $ver) in $((SECONDS - start)) s"
  fi
  case ":$PATH:" in
    *":$leasegate_gotool_dir:"*) ;;
    *) PATH="$leasegate_gotool_dir:$PATH" ;;
  esac
  export PATH
}
