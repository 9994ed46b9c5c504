#!/usr/bin/env bash
# The whole pytest suite (`make unit`): three pytest processes, two side by side, then one alone.
#
#   servers  tests/kube (the API-server tier), the controllers' reconcile tests, tests/cluster (the real
#            scheduler, controllers and kwok's nodes) and tests/engine: API servers, the controllers and the
#            engine's `up`s of the platform's charts (22 min of a serial run, before tests/cluster);
#   rest     everything else but the solo tests (24 min): mocks, faults, Prometheus, and every test that
#            starts a real vLLM (the vLLM tier and tests/controllers/test_vllm_controller_pods.py), so that
#            no two vLLM run from different processes (the /dev/shm leak check of tests/vllm/server.py
#            cannot tell whose object a name is);
#   solo     the tests that keep a real vLLM busy for minutes (marker vllm_solo: status under load, the
#            rotation under traffic), last and alone: on 2 cores other tiers' servers starved them.
#
# Why side by side: a serial run left the 2 cores 43 % idle on average (vmstat, 2026-12-02: waits on
# servers, reconcile loops, vLLM's single-threaded start-up). Each process's output is streamed with its
# name in front of every line; the run fails if any process fails, says which, and repeats each failed
# process's error lines and pytest's short summary last (CI shows the tail of the output, and the two
# streams interleave: a summary printed 5 minutes before the other process ends is buried). Extra
# arguments go to every pytest (not --junitxml: the processes would write one file).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=scripts/env.sh
source scripts/env.sh

SERVERS=(tests/kube tests/controllers/test_reconcile.py tests/cluster tests/engine)
ignore=()
for path in "${SERVERS[@]}"; do ignore+=("--ignore=$path"); done

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

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

t0=$(date +%s)
run servers -m "not vllm_solo" "${SERVERS[@]}" "$@" &
servers=$!
run rest -m "not vllm_solo" "${ignore[@]}" tests "$@" &
rest=$!
wait "$servers"; servers_rc=$?
echo "[suite] servers: exit $servers_rc after $(( $(date +%s) - t0 )) s"
wait "$rest"; rest_rc=$?
echo "[suite] rest: exit $rest_rc after $(( $(date +%s) - t0 )) s"
if [ "$servers_rc" != 0 ] || [ "$rest_rc" != 0 ]; then
  [ "$servers_rc" = 0 ] || recap servers
  [ "$rest_rc" = 0 ] || recap rest
  echo "[suite] failed: servers exit $servers_rc, rest exit $rest_rc (their lines above, prefixed)"
  exit 1
fi
run solo -m vllm_solo tests "$@"; solo_rc=$?
[ "$solo_rc" = 0 ] || recap solo
echo "[suite] solo: exit $solo_rc after $(( $(date +%s) - t0 )) s"
exit "$solo_rc"
