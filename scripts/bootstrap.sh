#!/usr/bin/env bash
# Install the Pulumi engine this project needs: the CLI, the Python language host, the helper that
# runs Python dynamic providers, the Kubernetes provider plugin — at the versions pinned in
# requirements.txt and tools/pulumi-cli/go.mod (scripts/versions.sh) — and the virtualenv the policy
# pack runs in (policy/requirements.txt).
#
# Order of preference, per piece: already installed at the right version (seconds) → a `pulumi` on
# PATH at the right version → the official installer → a build from the Go module proxy (the only
# way on machines that reach package registries but not get.pulumi.com). Idempotent: a stamp file
# per piece records what was installed, and nothing is rebuilt unless a pin changes.
#
# Installs where Pulumi users expect: $PULUMI_HOME/bin (default ~/.pulumi/bin) and
# $PULUMI_HOME/plugins/resource-kubernetes-v<version>/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/versions.sh
source "$here/scripts/versions.sh"

PULUMI_HOME="${TKF_PULUMI_HOME:-${PULUMI_HOME:-$HOME/.pulumi}}"  # the installation, not the run home (env.sh)
bin="$PULUMI_HOME/bin"
k8s_plugin_dir="$PULUMI_HOME/plugins/resource-kubernetes-v$PULUMI_KUBERNETES_VERSION"
mkdir -p "$bin"
export PATH="$bin:$PATH"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

log() { printf '[bootstrap] %s\n' "$*" >&2; }
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

need_go() {
  command -v go >/dev/null 2>&1 || {
    log "Go is not installed and the Pulumi CLI could not be installed otherwise."
    log "Install Go >= 1.24 (https://go.dev/dl/ or your package manager), then re-run $0."
    exit 1
  }
}

# go mod download prints the module's directory in the module cache.
module_dir() { (cd "$here/tools/pulumi-cli" && go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'); }

install_cli() {
  local want="v$PULUMI_CLI_VERSION" stamp="$bin/.tkf-pulumi-cli" t0
  t0=$(date +%s)
  if stamp_ok "$stamp" "$want" && [ -x "$bin/pulumi" ]; then return; fi
  if command -v pulumi >/dev/null 2>&1 && [ "$(pulumi version 2>/dev/null)" = "$want" ] \
     && [ "$(command -v pulumi)" != "$bin/pulumi" ]; then
    log "using $(command -v pulumi) ($want)"; ln -sf "$(command -v pulumi)" "$bin/pulumi"
  elif [ "${TKF_SKIP_INSTALLER:-}" != 1 ] && curl -fsSL --max-time 20 https://get.pulumi.com -o /tmp/tkf-get-pulumi.sh 2>/dev/null \
     && sh /tmp/tkf-get-pulumi.sh --version "$PULUMI_CLI_VERSION" --install-root "$PULUMI_HOME" >&2; then
    log "installed Pulumi $want with the official installer"
  else
    log "get.pulumi.com unreachable: building the Pulumi CLI $want from the Go module proxy (a few minutes, once)"
    need_go
    (cd "$here/tools/pulumi-cli" && nice go build -trimpath \
      -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$want" \
      -o "$bin/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
    log "built pulumi $want in $(elapsed "$t0")"
  fi
  [ "$("$bin/pulumi" version)" = "$want" ] || { log "pulumi version is $("$bin/pulumi" version), expected $want"; exit 1; }
  echo "$want" >"$stamp"
}

install_python_host() {
  local want="host=v$PULUMI_LANGUAGE_PYTHON_VERSION sdk=v$PULUMI_VERSION" stamp="$bin/.tkf-python-host" t0 sdk_dir
  t0=$(date +%s)
  if stamp_ok "$stamp" "$want" && [ -x "$bin/pulumi-language-python" ]; then return; fi
  # The official installer ships its own language host and scripts: keep them.
  if [ -x "$bin/pulumi-language-python" ] && [ ! -f "$stamp" ] && [ -x "$bin/pulumi-resource-pulumi-python" ]; then
    echo "$want" >"$stamp"; return
  fi
  need_go
  log "building the Python language host v$PULUMI_LANGUAGE_PYTHON_VERSION from the Go module proxy"
  (cd "$here/tools/pulumi-language-python" && nice go build -trimpath \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_LANGUAGE_PYTHON_VERSION" \
    -o "$bin/pulumi-language-python" github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python)
  # The scripts the host and the engine run are part of the Python SDK's source tree; take them
  # from the SDK release that matches the pulumi pip pin.
  sdk_dir="$(module_dir "github.com/pulumi/pulumi/sdk/v3@v$PULUMI_VERSION")"
  install -m 0755 "$sdk_dir/python/cmd/pulumi-language-python-exec" "$bin/pulumi-language-python-exec"
  install -m 0755 "$sdk_dir/python/dist/pulumi-resource-pulumi-python" "$bin/pulumi-resource-pulumi-python"
  log "installed the Python language host and dynamic-provider runner in $(elapsed "$t0")"
  echo "$want" >"$stamp"
}

install_kubernetes_provider() {
  local want="v$PULUMI_KUBERNETES_VERSION $PULUMI_KUBERNETES_PROVIDER_MODULE" stamp="$k8s_plugin_dir/.tkf-stamp" t0 src work
  t0=$(date +%s)
  if stamp_ok "$stamp" "$want" && [ -x "$k8s_plugin_dir/pulumi-resource-kubernetes" ]; then return; fi
  if [ -x "$k8s_plugin_dir/pulumi-resource-kubernetes" ] && [ ! -f "$stamp" ]; then
    echo "$want" >"$stamp"; return   # installed by `pulumi plugin install`
  fi
  need_go
  log "building the Kubernetes provider v$PULUMI_KUBERNETES_VERSION from the Go module proxy (a few minutes, once)"
  work="$here/tools/pulumi-kubernetes"
  src="$(cd "$work" && go mod download -json "$PULUMI_KUBERNETES_PROVIDER_MODULE" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  # What upstream's `go generate` does: embed the schema with its version stamped.
  python3 - "$src/cmd/pulumi-resource-kubernetes" "$work" "$PULUMI_KUBERNETES_VERSION" <<'PY'
import json, sys, pathlib
src, dst, version = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
schema = json.loads((src / "schema.json").read_text())
schema["version"] = version
(dst / "schema-embed.json").write_text(json.dumps(schema, separators=(",", ":")))
mapping = json.loads((src / "terraform-mapping.json").read_text())
(dst / "terraform-mapping-embed.json").write_text(json.dumps(mapping, separators=(",", ":")))
PY
  mkdir -p "$k8s_plugin_dir"
  (cd "$work" && nice go build -trimpath \
    -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$PULUMI_KUBERNETES_VERSION" \
    -o "$k8s_plugin_dir/pulumi-resource-kubernetes" .)
  rm -f "$work/schema-embed.json" "$work/terraform-mapping-embed.json"
  log "built the Kubernetes provider in $(elapsed "$t0")"
  echo "$want" >"$stamp"
}

# The policy pack (policy/, docs/policy.md) runs in a virtualenv of its own: pulumi-policy pins
# protobuf 5.29 while the program's virtualenv has protobuf 6. The engine starts the pack through
# policy/analyzer, which runs policy/.venv/bin/python (the language host built above is too old to
# start a pack directory itself).
install_policy_pack() {
  local req="$here/policy/requirements.txt" venv="$here/policy/.venv" want stamp t0
  [ -f "$req" ] || return 0
  want="$(sha256sum "$req" | cut -c1-16)"; stamp="$venv/.tkf-stamp"
  t0=$(date +%s)
  if stamp_ok "$stamp" "$want" && [ -x "$venv/bin/python" ]; then return; fi
  log "installing the policy pack's virtualenv (policy/.venv: pulumi-policy)"
  [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
  log "installed the policy pack's virtualenv in $(elapsed "$t0")"
  echo "$want" >"$stamp"
}

start=$(date +%s)
install_cli
install_python_host
install_kubernetes_provider
install_policy_pack
log "Pulumi engine ready in $(elapsed "$start"): $("$bin/pulumi" version), kubernetes v$PULUMI_KUBERNETES_VERSION (PULUMI_HOME=$PULUMI_HOME)"
