# Environment for running Pulumi on this project: `source scripts/env.sh` (scripts and the CLI do it).
# - the engine built by scripts/bootstrap.sh on PATH;
# - the local file backend inside the project (dev only; git-ignored) unless PULUMI_BACKEND_URL is set;
# - PULUMI_PYTHON_CMD: the project's virtualenv python, for the language host (see docs/engine.md).
_tkf_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# - PULUMI_HOME: a home of tkf's own beside the installation (TKF_PULUMI_HOME), without the engine's
#   always-on debug log, which costs half the CLI's CPU (tkf_infra/ops/engine_home.py; TKF_ENGINE_LOGS=1 keeps it);
export TKF_PULUMI_HOME="${TKF_PULUMI_HOME:-${PULUMI_HOME:-$HOME/.pulumi}}"
export PATH="$TKF_PULUMI_HOME/bin:$_tkf_root/.venv/bin:$PATH"
if [ -x "$_tkf_root/.venv/bin/python" ]; then
  PULUMI_HOME="$(PULUMI_HOME="$TKF_PULUMI_HOME" "$_tkf_root/.venv/bin/python" -c \
    'import sys; sys.path.insert(0, sys.argv[1]); from tkf_infra.ops.engine_home import run_home; print(run_home())' \
    "$_tkf_root")" || PULUMI_HOME="$TKF_PULUMI_HOME"
  export PULUMI_HOME
else
  export PULUMI_HOME="$TKF_PULUMI_HOME"
fi
export PULUMI_SKIP_UPDATE_CHECK=true
# - no automatic plugin downloads (the aws plugin pulumi-aws declares, fetched before every run even
#   without an EKS pool; see engine_env in tkf_infra/ops/stacks.py); set it to false to allow them;
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="${PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION:-true}"
# - diffs in parallel (engine_env in tkf_infra/ops/stacks.py says why); set it to false to turn it off;
export PULUMI_PARALLEL_DIFF="${PULUMI_PARALLEL_DIFF:-true}"
export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$_tkf_root/.pulumi-state}"
export PULUMI_PYTHON_CMD="$_tkf_root/.venv/bin/python"
mkdir -p "$_tkf_root/.pulumi-state"
