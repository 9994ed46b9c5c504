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
if [ "$stack" = dev ] && [ -z "${PULUMI_CONFIG_PASSPHRASE:-}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
  export PULUMI_CONFIG_PASSPHRASE="tkf-dev-only"
fi
pulumi stack select "$stack" --non-interactive >/dev/null 2>&1 \
  || pulumi stack init "$stack" --non-interactive >/dev/null
exec pulumi --non-interactive "$@" --stack "$stack"
