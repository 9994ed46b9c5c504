"""Facts about the platform's chart sources that the stack settings check at load and the components use.

Why a module of their own: they are the charts' facts (what is shipped, what the charts hard-code,
what render mode cannot template), not settings; `components/platform_charts.py` turns them into
Chart v4 arguments and docs/platform.md explains each.
"""

from __future__ import annotations

from typing import Literal

#: Where a piece's chart comes from: each project's repository, or the copies in components/data/charts/.
ChartSource = Literal["upstream", "vendored"]

#: The chart sources shipped in components/data/charts/ (`platform.charts: vendored`), one version each;
#: components/data/charts/SOURCES.md records their upstream repository, tag and commit.
VENDORED_CHARTS = {"gpuOperator": "v26.7.0", "certManager": "v1.17.0", "gatewayApi": "v1.5.1",
                   "kserve": "v0.20.0", "lws": "v0.8.0"}  # fmt: skip

#: Namespaces the upstream charts hard-code: KServe's CRDs name their conversion webhook
#: kserve/llmisvc-webhook-server-service and its presets live in `kserve`; the LWS CRD (crds/, not
#: templated) names lws-system/lws-webhook-service.
KSERVE_NAMESPACE = "kserve"
LWS_NAMESPACE = "lws-system"

#: Why render mode needs these pieces from local files (components/platform_charts.py and
#: components/prerequisites.py work around each; docs/platform.md).
RENDER_BLOCKERS = {"certManager": "its kubeVersion >= 1.22 gate; Helm assumes v1.20 offline",
                   "kserve": "the `lookup` in its CRD chart",
                   "gatewayApi": "the scope of its ValidatingAdmissionPolicy, which pulumi-kubernetes 4.25 asks a "
                                 "cluster for"}  # fmt: skip


def same_release(a: str, b: str) -> bool:
    """`0.8.0` and `v0.8.0` name one release (LWS publishes its chart as v0.8.0, and Helm accepts both)."""
    return a.removeprefix("v") == b.removeprefix("v")
