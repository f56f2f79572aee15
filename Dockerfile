# syntax=docker/dockerfile:1
#
# leasegate and leasectl as one small image: static binaries on distroless
# (no shell, no package manager), running as the unprivileged nonroot user.
#
#   docker build -t leasegate .
#   docker run --rm -p 7070:7070 leasegate --allow-insecure-remote   # embedded etcd, no auth: a try-out
#   docker run --rm leasegate --etcd a=http://etcd:2379 --auth-tokens /run/secrets/tokens
#
# It listens on :7070, and a non-loopback listener needs authentication
# (--auth-tokens, --jwt-keys, --tls-client-ca) or --allow-insecure-remote.
#
# The build stage runs .ci/build, the same script `go test ./deploy/...`
# runs in CI; deploy/dockerfile_test.go checks that it stays that way.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Modules first, so a source change does not download them again. The SDK
# (client/), the fencing library (fence/) and the generated API (proto/) are
# modules of their own that go.mod replaces with these directories: their
# go.mod files come too.
COPY go.mod go.sum ./
COPY client/go.mod client/go.sum ./client/
COPY fence/go.mod fence/go.sum ./fence/
COPY proto/go.mod proto/go.sum ./proto/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
# The build context has no .git (.dockerignore), so the toolchain cannot
# record the commit: pass it, and the version, for --version and
# leasegate_build_info. Without them the image reports "devel".
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t leasegate .
ARG VERSION REVISION
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH VERSION=$VERSION REVISION=$REVISION .ci/build /out
# The embedded-etcd data directory must exist and belong to nonroot:
# distroless has no shell to create it at run time.
RUN mkdir -p /data/leasegate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/leasegate /out/leasectl /usr/local/bin/
COPY --from=build --chown=65532:65532 /data /data
USER 65532:65532
WORKDIR /data
# Inside a container the gateway must listen on every interface; the
# embedded etcd (no --etcd) keeps its data in the volume.
ENV LEASEGATE_LISTEN=:7070 \
    LEASEGATE_DATA_DIR=/data/leasegate
VOLUME ["/data"]
EXPOSE 7070
ENTRYPOINT ["/usr/local/bin/leasegate"]
