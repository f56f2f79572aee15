#!/usr/bin/env bash
# Installs the pinned protobuf toolchain into "$(go env GOPATH)/bin":
#   buf, protoc-gen-go, protoc-gen-connect-go.
# Each tool is (re)built with `go install` only when the binary there is
# missing or was built from another module version, so a second run costs
# three `go version -m` calls. Silent on success; on failure it prints the
# go install output.
#
# Keep PROTOC_GEN_GO_VERSION and CONNECT_VERSION equal to the versions of
# google.golang.org/protobuf and connectrpc.com/connect in proto/go.mod (the
# generated code's module; go.mod and client/go.mod select the same), then
# run .ci/proto-check to regenerate.
#
# Usage: bash .ci/tools.sh        (or source it: it then also puts the bin
#                                 directory on PATH)
set -euo pipefail

BUF_VERSION=v1.75.0
PROTOC_GEN_GO_VERSION=v1.36.12
CONNECT_VERSION=v1.21.1

leasegate_tools_bin="$(go env GOPATH)"
leasegate_tools_bin="${leasegate_tools_bin%%:*}/bin"

# leasegate_tool_ok BINARY MODULE VERSION: the binary exists and was built
# from MODULE at VERSION.
leasegate_tool_ok() {
  local bin="$leasegate_tools_bin/$1"
  [[ -x "$bin" ]] || return 1
  go version -m "$bin" 2>/dev/null |
    awk -v mod="$2" -v ver="$3" '$1 == "mod" && $2 == mod && $3 == ver { found = 1 } END { exit !found }'
}

# leasegate_tool_install BINARY PACKAGE MODULE VERSION
leasegate_tool_install() {
  leasegate_tool_ok "$1" "$3" "$4" && return 0
  local log
  log="$(mktemp)"
  # @version makes go install ignore the repository's go.mod.
  if ! GOBIN="$leasegate_tools_bin" go install "$2@$4" >"$log" 2>&1; then
    echo "tools.sh: go install $2@$4 failed:" >&2
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
  if ! leasegate_tool_ok "$1" "$3" "$4"; then
    echo "tools.sh: $leasegate_tools_bin/$1 is not $3@$4 after go install" >&2
    return 1
  fi
}

leasegate_tool_install buf \
  github.com/bufbuild/buf/cmd/buf github.com/bufbuild/buf "$BUF_VERSION"
leasegate_tool_install protoc-gen-go \
  google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/protobuf "$PROTOC_GEN_GO_VERSION"
leasegate_tool_install protoc-gen-connect-go \
  connectrpc.com/connect/cmd/protoc-gen-connect-go connectrpc.com/connect "$CONNECT_VERSION"

case ":$PATH:" in
  *":$leasegate_tools_bin:"*) ;;
  *) PATH="$leasegate_tools_bin:$PATH" ;;
esac
export PATH
