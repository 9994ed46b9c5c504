#!/usr/bin/env bash
# Run the pulumi CLI on this project with the project's environment, creating the stack if needed:
#   scripts/pulumi.sh <stack> <pulumi args...>      e.g. scripts/pulumi.sh dev preview
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=scripts/env.sh
source scripts/env.sh
stack="${1:?usage: scripts/pulumi.sh <stack> <pulumi args...>}"; shift
# The dev stack's secrets use a DOCUMENTED, DEV-ONLY passphrase; every other stack needs yours.
if { [ "$stack" = dev ] || [ "$stack" = dev-platform ]; } && [ -z "${PULUMI_CONFIG_PASSPHRASE:-}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
  export PULUMI_CONFIG_PASSPHRASE="tkf-dev-only"
fi
pulumi stack select "$stack" --non-interactive >/dev/null 2>&1 \
  || pulumi stack init "$stack" --non-interactive >/dev/null
# A private TMPDIR, removed on exit: the Kubernetes provider copies the kubeconfig it is given into
# $TMPDIR on every run and never deletes it (run_tmpdir in tkf_infra/ops/engine_home.py says where).
TMPDIR="$(mktemp -d -t tkf-engine-tmp-XXXXXX)"
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
pulumi --non-interactive "$@" --stack "$stack"
