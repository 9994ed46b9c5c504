#!/usr/bin/env bash
# The whole pytest suite (`make unit`): four pytest processes. With --full (`make test`, on a virtualenv
# made by `scripts/setup.sh --venv-dev`) also ruff, mypy and the rest of `scripts/setup.sh --dev`, which
# runs from the start beside them and beside the plain tests.
#
#   plain    every test that needs nothing but the virtualenv (no marker of a tier: mocks, the fit physics,
#            renders, CLI parsing): with --full it runs while the setup builds the Go tools and installs
#            the servers, so a machine with nothing yet does not wait for the builds to start testing;
#   servers  tests/kube (the API-server tier), the controllers' reconcile tests and tests/cluster (the real
#            scheduler, controllers and kwok's nodes) but its LoRA and scaling `up`s (`REST_CLUSTER`, in rest), once
#            the setup is done: the longest process, started first (2026-12-07, beside the others: cluster 24 min,
#            kube 16.6, reconcile 5.9);
#   rest     the other tiers' tests (tests/engine's 11 min, the other engine tests, `REST_CLUSTER`, Prometheus, the vLLM
#            tier, the report in Chromium), once the setup and plain are done: every test that starts a real vLLM
#            is in this one process (the vLLM tier and tests/controllers/test_vllm_controller_pods.py), so
#            that no two vLLM run from different processes (the /dev/shm leak check of tests/vllm/server.py
#            cannot tell whose object a name is);
#   solo     the tests that keep a real vLLM busy for minutes (marker vllm_solo: status under load, the
#            rotation under traffic), last and alone: on 2 cores other tiers' servers starved them.
#
# Why side by side: a serial run left the 2 cores 43 % idle on average (vmstat, 2026-12-02: waits on
# servers, reconcile loops, vLLM's single-threaded start-up), and on a cold machine the Go builds leave
# room for the plain tests (the builds run under `nice`). Each process's output is streamed with its name
# in front of every line; the run fails if the setup or any process fails, says which, and repeats each
# failed process's error lines and pytest's short summary last (CI shows the tail of the output, and the
# streams interleave: a summary printed 5 minutes before the other process ends is buried). Extra
# arguments go to every pytest (not --junitxml: the processes would write one file).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

full=0
if [ "${1:-}" = "--full" ]; then full=1; shift; fi

# The cluster tier's LoRA and scaling `up`s run in rest instead, to even the two processes out: in the cold run of
# 2026-12-07 (`f0b7f7d`, 81:56 in all) servers took 49:29 with them and rest 40:12, and the run waits for both;
# with them in rest (`ea619e1`, 72:29 cold): servers 41:24, rest 39:57.
REST_CLUSTER=(tests/cluster/test_lora_and_scaling_on_cluster.py)
SERVERS=(tests/kube tests/controllers/test_reconcile.py)
for path in tests/cluster/test_*.py; do
  [[ " ${REST_CLUSTER[*]} " == *" $path "* ]] || SERVERS+=("$path")
done
ignore=()
for path in "${SERVERS[@]}"; do ignore+=("--ignore=$path"); done
# A tier's marker means the test needs what the setup builds or installs beyond the virtualenv.
TIERS="engine or apiserver or cluster or prometheus or vllm or browser"

logs="$(mktemp -d)"
trap 'rm -rf "$logs"; jobs -p | xargs -r kill 2>/dev/null' EXIT

run() {  # run NAME PYTEST-ARGS...: pytest with every line of its output prefixed by [NAME] (and kept)
  local name="$1"; shift
  .venv/bin/python -m pytest -q "$@" 2>&1 | tee "$logs/$name.log" | sed -u "s/^/[$name] /"
  return "${PIPESTATUS[0]}"
}

recap() {  # recap NAME: a failed process's assertion lines (first 40) and its short summary, again
  local log="$logs/$1.log"
  echo "[suite] $1 failed; its error lines, then pytest's short summary, again:"
  grep -E '^E  ' "$log" | head -n 40 | sed "s/^/[$1] /"
  sed -n '/short test summary info/,$p' "$log" | sed "s/^/[$1] /"
}

setup_dev() {  # the setup, its lines prefixed [setup] (setup.sh's own lines have it already)
  bash scripts/setup.sh --dev 2>&1 | sed -u '/^\[setup\] /!s/^/[setup] /'
  return "${PIPESTATUS[0]}"
}

t0=$(date +%s)
since() { echo "$(( $(date +%s) - t0 )) s"; }
if [ $full = 1 ]; then
  setup_dev &
  setup=$!
  # The Go builds run under `nice`: these two, then the plain tests, take the cores first.
  if ! .venv/bin/ruff check . || ! .venv/bin/mypy .; then
    echo "[suite] failed: ruff or mypy (above)"
    exit 1
  fi
fi
# The plain tests need the engine's environment only for what scripts/env.sh exports; the engine itself
# may not be built yet, and they do not use it.
# shellcheck source=scripts/env.sh
source scripts/env.sh
run plain -m "not ($TIERS or vllm_solo)" "${ignore[@]}" tests "$@" &
plain=$!
if [ $full = 1 ]; then
  wait "$setup"; setup_rc=$?
  echo "[suite] setup: exit $setup_rc after $(since)"
  if [ "$setup_rc" != 0 ]; then
    wait "$plain"; plain_rc=$?
    echo "[suite] failed: the setup (its lines above, prefixed [setup]); plain tests exit $plain_rc"
    exit 1
  fi
  # shellcheck source=scripts/env.sh
  source scripts/env.sh  # again: the engine's run home links the engine, which exists only now
fi
run servers -m "not vllm_solo" "${SERVERS[@]}" "$@" &
servers=$!
wait "$plain"; plain_rc=$?
echo "[suite] plain: exit $plain_rc after $(since)"
run rest -m "($TIERS) and not vllm_solo" "${ignore[@]}" tests "$@" &
rest=$!
wait "$servers"; servers_rc=$?
echo "[suite] servers: exit $servers_rc after $(since)"
wait "$rest"; rest_rc=$?
echo "[suite] rest: exit $rest_rc after $(since)"
if [ "$plain_rc" != 0 ] || [ "$servers_rc" != 0 ] || [ "$rest_rc" != 0 ]; then
  [ "$plain_rc" = 0 ] || recap plain
  [ "$servers_rc" = 0 ] || recap servers
  [ "$rest_rc" = 0 ] || recap rest
  echo "[suite] failed: plain exit $plain_rc, servers exit $servers_rc, rest exit $rest_rc (their lines above, prefixed)"
  exit 1
fi
run solo -m vllm_solo tests "$@"; solo_rc=$?
[ "$solo_rc" = 0 ] || recap solo
echo "[suite] solo: exit $solo_rc after $(since)"
exit "$solo_rc"
