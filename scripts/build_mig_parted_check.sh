#!/usr/bin/env bash
# Build mig-parted-check (tools/mig-parted-check: NVIDIA mig-parted v0.15.0's config parser, copied
# with provenance, behind a small CLI) into ${TKF_TOOLS_HOME:-~/.cache/tkf-infra}/bin/mig-parted-check.
# The tests validate every MIG config tkf-infra emits with it (the format the GPU Operator's
# mig-manager reads). Needs Go >= 1.26 and a C compiler (go-nvml, which the parser links, uses cgo;
# nothing calls NVML). A stamp records a hash of the sources and the Go version: re-running is
# instant unless one of them changed; a cold build takes about 20 s.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$here/tools/mig-parted-check"
bin_dir="${TKF_TOOLS_HOME:-$HOME/.cache/tkf-infra}/bin"
out="$bin_dir/mig-parted-check"
stamp="$out.stamp"
log() { printf '[build_mig_parted_check] %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || {
  log "Go is not installed. Install Go >= 1.26 (https://go.dev/dl/ or your package manager), then re-run $0."
  exit 1
}
command -v "${CC:-cc}" >/dev/null 2>&1 || {
  log "no C compiler (${CC:-cc}): go-nvml needs cgo. Install gcc (apt-get install gcc), then re-run $0."
  exit 1
}

want="$(cd "$src" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) | sort | xargs cat | sha256sum | cut -d' ' -f1) $(go env GOVERSION)"
if [ -x "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  log "up to date: $out"
  exit 0
fi

log "building mig-parted-check (mig-parted v0.15.0 config parser)"
t0=$(date +%s)
mkdir -p "$bin_dir"
# -w: go-nvml's cgo prologue warns about deprecated NVML calls it never makes here.
(cd "$src" && GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--w}" nice go build \
  -trimpath -ldflags "-s -w" -o "$out.tmp" .)
mv "$out.tmp" "$out"
echo "$want" >"$stamp"
log "built $out ($(du -h "$out" | cut -f1)) in $(( $(date +%s) - t0 ))s"
