# Environment for running Pulumi on this project: `source scripts/env.sh` (scripts and the CLI do it).
# - the engine built by scripts/bootstrap.sh on PATH;
# - the local file backend inside the project (dev only; git-ignored) unless PULUMI_BACKEND_URL is set;
# - PULUMI_PYTHON_CMD: the project's virtualenv python, for the language host (see docs/engine.md).
_tkf_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PULUMI_HOME="${PULUMI_HOME:-$HOME/.pulumi}"
export PATH="$PULUMI_HOME/bin:$_tkf_root/.venv/bin:$PATH"
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$_tkf_root/.pulumi-state}"
export PULUMI_PYTHON_CMD="$_tkf_root/.venv/bin/python"
mkdir -p "$_tkf_root/.pulumi-state"
