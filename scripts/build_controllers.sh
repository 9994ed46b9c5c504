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
# Stamps and the Go build cache make re-runs quick (scripts/go_tools.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$here/tools/controllers"
log() { printf '[build_controllers] %s\n' "$*" >&2; }
# shellcheck source=scripts/go_tools.sh
. "$here/scripts/go_tools.sh"
go_tools_require build_controllers

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
want="$(go_tools_stamp "$src" "${BASH_SOURCE[0]}")"
if go_tools_fresh "$want" kserve-llmisvc-manager lws-manager; then
  log "up to date: kserve-llmisvc-manager, lws-manager (KServe $kserve, LWS $lws)"
  exit 0
fi

log "building KServe $kserve's llmisvc manager and LWS $lws's manager (cold: several minutes on 2 cores)"
t0=$(date +%s)
# `go build -o DIR` names each binary after its package's last element: llmisvc and cmd.
go_tools_build "$src" "$want" "-s -w" llmisvc=kserve-llmisvc-manager cmd=lws-manager -- \
  github.com/kserve/kserve/cmd/llmisvc sigs.k8s.io/lws/cmd
log "built kserve-llmisvc-manager and lws-manager in $(( $(date +%s) - t0 ))s"
