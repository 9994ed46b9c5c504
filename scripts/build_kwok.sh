#!/usr/bin/env bash
# Build kwok (sigs.k8s.io/kwok, simulated kubelets: it heartbeats the Nodes the cluster tier creates and
# walks their pods through the stages in tests/cluster/stages/) from the Go module proxy into
# ${TKF_TOOLS_HOME:-~/.cache/tkf-infra}/bin/kwok.
#
# `go install MODULE/cmd/kwok@VERSION`: the exact version is fetched even where the proxy's version list
# is unavailable, and go.sum is checked against sum.golang.org. kwok's binary ships no stages (kwokctl
# embeds them, kwok does not): the tier's copies and their source are in tests/cluster/stages/. A stamp
# file records the version and the Go version: re-running is instant unless one of them changed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KWOK_MODULE="sigs.k8s.io/kwok"
KWOK_VERSION="v0.8.0"  # also in tests/cluster/stages/SOURCES.md (the stages' source)
bin_dir="${TKF_TOOLS_HOME:-$HOME/.cache/tkf-infra}/bin"
out="$bin_dir/kwok"
stamp="$out.stamp"
log() { printf '[build_kwok] %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || {
  log "Go is not installed. Install Go >= 1.26 (https://go.dev/dl/ or your package manager), then re-run $0."
  exit 1
}

want="$KWOK_MODULE@$KWOK_VERSION $(go env GOVERSION)"
if [ -x "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  log "up to date: $out ($KWOK_VERSION)"
  exit 0
fi

log "building kwok $KWOK_VERSION (cold: ~2-3 minutes on 2 cores; cached: seconds)"
t0=$(date +%s)
mkdir -p "$bin_dir"
tmp="$(mktemp -d "$bin_dir/.kwok-build.XXXXXX")"  # per process: two checkouts may build at once
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0 nice go install -trimpath -ldflags "-s -w" \
  "$KWOK_MODULE/cmd/kwok@$KWOK_VERSION"
mv "$tmp/kwok" "$out"
echo "$want" >"$stamp"
log "built $out ($(du -h "$out" | cut -f1), kwok $KWOK_VERSION) in $(( $(date +%s) - t0 ))s"
