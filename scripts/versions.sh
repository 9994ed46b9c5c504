# Versions of the Pulumi engine pieces, each derived from the one file that pins it. Sourced by
# scripts/bootstrap.sh and scripts/setup.sh.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_req="$_root/requirements.txt"
# The Python SDK (pip) and the scripts of its source tree the engine runs: requirements.txt.
PULUMI_VERSION="$(sed -n 's/^pulumi==\([0-9.]*\).*/\1/p' "$_req")"
# The CLI: the pkg/v3 module tools/pulumi-cli/go.mod requires. It may be newer than the SDK (Pulumi
# supports a newer CLI with an older SDK, not the reverse): the Go proxy serves CLI releases that PyPI
# has no SDK for yet (docs/engine.md, "Which pair is pinned").
PULUMI_CLI_VERSION="$(sed -n 's/^require github.com\/pulumi\/pulumi\/pkg\/v3 v\([0-9.]*\)$/\1/p' "$_root/tools/pulumi-cli/go.mod")"
PULUMI_KUBERNETES_VERSION="$(sed -n 's/^pulumi-kubernetes==\([0-9.]*\).*/\1/p' "$_req")"
# Newer Pulumi releases publish the Python language host as its own Go module, which the module
# proxy reachable from these machines refuses; v3.79.0 is the newest release that has it inside
# github.com/pulumi/pulumi/sdk/v3 (docs/engine.md explains the consequences).
PULUMI_LANGUAGE_PYTHON_VERSION="3.79.0"
# pulumi-kubernetes publishes no provider/v4 tags; the module proxy serves this commit of
# 2026-01-15, the release commit of v4.25.0 (published to PyPI on 2026-01-16).
PULUMI_KUBERNETES_PROVIDER_MODULE="github.com/pulumi/pulumi-kubernetes/provider/v4@v4.0.0-20260115033456-f47bc2d6f199"
export PULUMI_VERSION PULUMI_CLI_VERSION PULUMI_KUBERNETES_VERSION PULUMI_LANGUAGE_PYTHON_VERSION PULUMI_KUBERNETES_PROVIDER_MODULE
