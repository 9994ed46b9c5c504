#!/usr/bin/env bash
# Build tkf-kube-apiserver (embedded etcd + kube-apiserver + kube-controller-manager, and kube-scheduler for
# the cluster tier's `--cluster`, for the `apiserver`-marked tests) from the Go module proxy into
# ${TKF_TOOLS_HOME:-~/.cache/tkf-infra}/bin/tkf-kube-apiserver.
#
# The Kubernetes version is the k8s.io/kubernetes pin in tools/kube-apiserver/go.mod; it is stamped
# into the binary so /version reports it (unstamped, /version says v0.0.0 and the Pulumi Kubernetes
# provider then treats the cluster as pre-1.24). A stamp file records a hash of the module files and
# the Go version: re-running is instant unless one of them changed. A cold build takes long
# (~all of Kubernetes' apiserver, controller-manager and scheduler code); the Go build cache makes rebuilds quick.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$here/tools/kube-apiserver"
bin_dir="${TKF_TOOLS_HOME:-$HOME/.cache/tkf-infra}/bin"
out="$bin_dir/tkf-kube-apiserver"
stamp="$out.stamp"
log() { printf '[build_kube_apiserver] %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || {
  log "Go is not installed. Install Go >= 1.26 (https://go.dev/dl/ or your package manager), then re-run $0."
  exit 1
}

kube_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ {print $2; exit}' "$src/go.mod")"
[[ "$kube_version" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || { log "no k8s.io/kubernetes v1.X.Y pin in $src/go.mod"; exit 1; }
minor="${BASH_REMATCH[1]}"

want="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -d' ' -f1) $(go env GOVERSION)"
if [ -x "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  log "up to date: $out (Kubernetes $kube_version)"
  exit 0
fi

log "building Kubernetes $kube_version kube-apiserver + etcd + controller-manager + scheduler (cold: many minutes on 2 cores; cached: about a minute)"
t0=$(date +%s)
mkdir -p "$bin_dir"
pkg=k8s.io/component-base/version
(cd "$src" && GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0 nice go build -trimpath \
  -ldflags "-s -w -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
  -o "$out.tmp.$$" .)
mv "$out.tmp.$$" "$out"  # a per-process name: two checkouts may build at once
echo "$want" >"$stamp"
log "built $out ($(du -h "$out" | cut -f1), Kubernetes $kube_version) in $(( $(date +%s) - t0 ))s"
