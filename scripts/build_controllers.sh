#!/usr/bin/env bash
# Build the upstream controllers the `controllers` test tier runs against the test API server
# (tests/controllers/), from the Go module proxy, into ${TKF_TOOLS_HOME:-~/.cache/tkf-infra}/bin:
#   kserve-llmisvc-manager  KServe's LLMInferenceService controller manager (cmd/llmisvc), with its
#                           webhook server, at the KServe release the vendored chart pins;
#   lws-manager             LeaderWorkerSet's controller manager (sigs.k8s.io/lws ./cmd) with its
#                           defaulting, validating and pod webhooks, at the LWS chart's release.
# The version is the vendored chart's (components/data/charts/<piece>-vX.Y.Z): the controller that
# reconciles our objects is the one the platform installs. tools/controllers/go.mod requires both
# releases (this script refuses to build when it and the charts disagree) with KServe's own replace
# directives, and one `go build` links both managers: the Kubernetes libraries they share are compiled
# once (a cold build of the two took 518 s one after the other, each in its own module).
# A stamp (the module files, the Go version, this script) makes a re-run instant; the Go build cache
# makes a rebuild quick.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$here/tools/controllers"
bin_dir="${TKF_TOOLS_HOME:-$HOME/.cache/tkf-infra}/bin"
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

pinned() {  # pinned MODULE CHART: the module's version in tools/controllers/go.mod, which must be the chart's
  local version chart
  version="$(awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$src/go.mod")"
  chart="$(chart_version "$2")"
  [ "$version" = "$chart" ] || {
    log "tools/controllers/go.mod requires $1 ${version:-(nothing)} but the vendored $2 chart is $chart:"
    log "run: (cd tools/controllers && go get $1@$chart && go mod tidy), then re-run $0"
    exit 1
  }
  echo "$version"
}

kserve="$(pinned github.com/kserve/kserve kserve)"
lws="$(pinned sigs.k8s.io/lws lws)"
want="$(cat "$src/go.mod" "$src/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16) $(go env GOVERSION)"
names=(kserve-llmisvc-manager lws-manager)
pkgs=(github.com/kserve/kserve/cmd/llmisvc sigs.k8s.io/lws/cmd)
fresh=1
for name in "${names[@]}"; do
  [ -x "$bin_dir/$name" ] && [ -f "$bin_dir/$name.stamp" ] && [ "$(cat "$bin_dir/$name.stamp")" = "$want" ] || fresh=0
done
if [ $fresh = 1 ]; then
  log "up to date: ${names[*]} (KServe $kserve, LWS $lws)"
  exit 0
fi

log "building KServe $kserve's llmisvc manager and LWS $lws's manager (cold: several minutes on 2 cores)"
t0=$(date +%s)
mkdir -p "$bin_dir"
tmp="$(mktemp -d "$bin_dir/.controllers-build.XXXXXX")"  # per process: two checkouts may build at once
trap 'rm -rf "$tmp"' EXIT
# `go build -o DIR` names each binary after its package's last element: llmisvc and cmd.
(cd "$src" && GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0 nice go build -trimpath -ldflags "-s -w" \
  -o "$tmp/" "${pkgs[@]}")
for i in "${!names[@]}"; do
  mv "$tmp/$(basename "${pkgs[$i]}")" "$bin_dir/${names[$i]}"
  echo "$want" >"$bin_dir/${names[$i]}.stamp"
done
log "built ${names[*]} in $(( $(date +%s) - t0 ))s"
