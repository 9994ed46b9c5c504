#!/usr/bin/env bash
# Regenerate components/data/charts/keda-v2.18.0/ (the vendored KEDA install, a **generated** file)
# from KEDA's own source, the way its release job builds the `keda-2.18.0.yaml` release asset.
#
# Why generated: KEDA publishes no chart in its repository (kedacore/charts is a separate repository,
# which the Go module proxy does not serve); its repository's install is the kustomize tree config/,
# whose images say `:main`. The release recipe (Makefile target `release` at v2.18.0) pins the three
# images with `kustomize edit set image`, sets the version label in config/default's label transformer,
# and runs `kustomize build config/default`. This script does exactly those steps on the Go module
# proxy's zip of github.com/kedacore/keda/v2@v2.18.0, with kustomize v5.7.1 (the version KEDA's go.mod
# pins as a tool), and writes the result plus the repository's LICENSE. It leaves out the recipe's
# `manifests` step (controller-gen regenerating the CRDs: the tag's committed CRDs are used as they are)
# and `set-version`/`generate-scalers-schema` (they touch Go sources and docs only).
#
# Usage: scripts/vendor_keda.sh   (needs Go and the module proxy; then update SHA256SUMS, see SOURCES.md)
set -euo pipefail

version=2.18.0
commit=559e73850876f0c1d2fe915f9c23904608e5e235   # refs/tags/v2.18.0, from the proxy's .info
kustomize_version=v5.7.1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$here/components/data/charts/keda-v$version"
proxy="${GOPROXY_URL:-https://proxy.golang.org}/github.com/kedacore/keda/v2/@v/v$version"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log() { printf '[vendor_keda] %s\n' "$*" >&2; }

curl -fsSL -o "$work/keda.info" "$proxy.info"
grep -q "\"Hash\":\"$commit\"" "$work/keda.info" || { log "proxy .info names another commit: $(cat "$work/keda.info")"; exit 1; }
curl -fsSL -o "$work/keda.zip" "$proxy.zip"
(cd "$work" && unzip -q keda.zip)
src="$work/github.com/kedacore/keda/v2@v$version"

GOBIN="$work/bin" GOFLAGS=-buildvcs=false go install "sigs.k8s.io/kustomize/kustomize/v5@$kustomize_version"
kustomize="$work/bin/kustomize"

(cd "$src/config/manager" && "$kustomize" edit set image "ghcr.io/kedacore/keda=ghcr.io/kedacore/keda:$version")
(cd "$src/config/metrics-server" && "$kustomize" edit set image \
  "ghcr.io/kedacore/keda-metrics-apiserver=ghcr.io/kedacore/keda-metrics-apiserver:$version")
(cd "$src/config/webhooks" && "$kustomize" edit set image \
  "ghcr.io/kedacore/keda-admission-webhooks=ghcr.io/kedacore/keda-admission-webhooks:$version")
sed -i -e "s@version:[ ].*@version: $version@g" "$src/config/default/kustomize-config/metadataLabelTransformer.yaml"

mkdir -p "$out"
"$kustomize" build "$src/config/default" > "$out/keda-$version.yaml"
cp "$src/LICENSE" "$out/LICENSE"
log "wrote $out/keda-$version.yaml ($(grep -c '^kind:' "$out/keda-$version.yaml") objects) and LICENSE"
