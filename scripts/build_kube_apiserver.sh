#!/usr/bin/env bash
# Build tkf-kube-apiserver (embedded etcd + kube-apiserver + kube-controller-manager, and kube-scheduler for
# the cluster tier's `--cluster`, for the `apiserver`-marked tests) and kwok (sigs.k8s.io/kwok, the cluster
# tier's simulated kubelets: it heartbeats the Nodes tests/cluster creates and walks their pods through the
# stages in tests/cluster/stages/) from the Go module proxy into ${TKF_TOOLS_HOME:-~/.cache/tkf-infra}/bin.
#
# kwok's version is its pin in tools/kube-apiserver/go.mod (tools.go requires it). One `go build` links
# both: kwok's Kubernetes libraries are the control plane's (this module's v1.36 replaces), compiled once
# (kwok alone took 189 s cold with `go install`, nearly all of it those libraries). kwok's binary ships no
# stages (kwokctl embeds them, kwok does not): the tier's copies and their source are in
# tests/cluster/stages/.
#
# The Kubernetes version is the k8s.io/kubernetes pin in tools/kube-apiserver/go.mod; it is stamped
# into the binary so /version reports it (unstamped, /version says v0.0.0 and the Pulumi Kubernetes
# provider then treats the cluster as pre-1.24). A cold build takes long (~all of Kubernetes' apiserver,
# controller-manager and scheduler code); stamps and the Go build cache make re-runs quick (scripts/go_tools.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$here/tools/kube-apiserver"
log() { printf '[build_kube_apiserver] %s\n' "$*" >&2; }
# shellcheck source=scripts/go_tools.sh
. "$here/scripts/go_tools.sh"
go_tools_require build_kube_apiserver
out="$GO_TOOLS_BIN/tkf-kube-apiserver"
kwok="$GO_TOOLS_BIN/kwok"

kube_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ {print $2; exit}' "$src/go.mod")"
[[ "$kube_version" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || { log "no k8s.io/kubernetes v1.X.Y pin in $src/go.mod"; exit 1; }
minor="${BASH_REMATCH[1]}"
kwok_version="$(awk '$1 == "sigs.k8s.io/kwok" && $2 ~ /^v/ {print $2; exit}' "$src/go.mod")"

want="$(go_tools_stamp "$src" "${BASH_SOURCE[0]}")"
if go_tools_fresh "$want" tkf-kube-apiserver kwok; then
  log "up to date: $out (Kubernetes $kube_version), $kwok ($kwok_version)"
  exit 0
fi

log "building Kubernetes $kube_version kube-apiserver + etcd + controller-manager + scheduler, and kwok $kwok_version (cold: many minutes on 2 cores; cached: about a minute)"
t0=$(date +%s)
pkg=k8s.io/component-base/version
# `go build -o DIR` names each binary after its package: kube-apiserver (this module's directory) and kwok.
# The -X stamp is for the control plane's /version; kwok links k8s.io/component-base/version too and
# gets the same value (its own version and the kubelet version it reports are kwok's pkg/consts,
# unstamped, as with `go install`).
go_tools_build "$src" "$want" \
  "-s -w -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
  kube-apiserver=tkf-kube-apiserver kwok=kwok -- . sigs.k8s.io/kwok/cmd/kwok
log "built $out ($(du -h "$out" | cut -f1), Kubernetes $kube_version) and $kwok ($kwok_version) in $(( $(date +%s) - t0 ))s"
