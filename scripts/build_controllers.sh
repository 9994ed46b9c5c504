#!/usr/bin/env bash
# Build the upstream controllers the `controllers` test tier runs against the test API server
# (tests/controllers/), from the Go module proxy, into ${TKF_TOOLS_HOME:-~/.cache/tkf-infra}/bin:
#   kserve-llmisvc-manager  KServe's LLMInferenceService controller manager (cmd/llmisvc), with its
#                           webhook server, at the KServe release the vendored chart pins;
#   lws-manager             LeaderWorkerSet's controller manager (sigs.k8s.io/lws ./cmd) with its
#                           defaulting, validating and pod webhooks, at the LWS chart's release.
# The version is the vendored chart's (components/data/charts/<piece>-vX.Y.Z): the controller that
# reconciles our objects is the one the platform installs.
#
# Why a copy of each module: KServe's go.mod has `replace` directives, which `go install pkg@version`
# refuses; a build inside the module directory honours them. The module cache is read-only, so the
# module is copied to a scratch directory first. A stamp per binary (module@version, Go version, this
# script) makes a re-run instant; the Go build cache makes a rebuild quick.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${TKF_TOOLS_HOME:-$HOME/.cache/tkf-infra}/bin"
src_root="${TKF_TOOLS_HOME:-$HOME/.cache/tkf-infra}/src"
log() { printf '[build_controllers] %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || {
  log "Go is not installed. Install Go >= 1.26 (https://go.dev/dl/ or your package manager), then re-run $0."
  exit 1
}

chart_version() {  # the vendored chart directory's version: components/data/charts/<piece>-vX.Y.Z
  local dir
  dir="$(cd "$here/components/data/charts" && ls -d "$1"-v*/ 2>/dev/null | head -1)"
  [ -n "$dir" ] || { log "no vendored chart components/data/charts/$1-v*"; exit 1; }
  dir="${dir%/}"
  echo "${dir#"$1"-}"
}

build() {  # build NAME MODULE VERSION PACKAGE
  local name="$1" module="$2" version="$3" pkg="$4"
  local out="$bin_dir/$name" stamp="$bin_dir/$name.stamp"
  local want
  want="$module@$version $pkg $(go env GOVERSION) $(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
  if [ -x "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    log "up to date: $out ($module@$version)"
    return
  fi
  log "building $name from $module@$version (cold: a few minutes on 2 cores)"
  local t0 dir copy
  t0=$(date +%s)
  dir="$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$dir" ] || { log "the Go module proxy did not serve $module@$version"; exit 1; }
  copy="$src_root/$name"
  rm -rf "$copy" && mkdir -p "$src_root" "$bin_dir"
  cp -r "$dir" "$copy" && chmod -R u+w "$copy"
  (cd "$copy" && GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 nice go build -trimpath -ldflags "-s -w" \
    -o "$out.tmp.$$" "$pkg")
  mv "$out.tmp.$$" "$out"  # a per-process name: two checkouts may build at once
  echo "$want" >"$stamp"
  log "built $out ($(du -h "$out" | cut -f1)) in $(( $(date +%s) - t0 ))s"
}

build kserve-llmisvc-manager github.com/kserve/kserve "$(chart_version kserve)" ./cmd/llmisvc
build lws-manager sigs.k8s.io/lws "$(chart_version lws)" ./cmd
