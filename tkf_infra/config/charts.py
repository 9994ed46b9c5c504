"""Facts about the platform's chart sources that the stack settings check at load and the components use.

Why a module of their own: they are the charts' facts (what is shipped, what the charts hard-code,
what render mode cannot template), not settings; `components/platform_charts.py` turns them into
Chart v4 arguments and docs/platform.md explains each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from tkf_infra.names import PROJECT_ROOT

#: A relative `chartPath` is taken from the project's root (where the program runs).
PROJECT = PROJECT_ROOT
#: KServe's piece is three charts, found side by side in its folder (KServe's charts/).
KSERVE_CHARTS = ("kserve-llmisvc-crd", "kserve-llmisvc-resources", "kserve-runtime-configs")

#: Where a piece's chart comes from: each project's repository, or the copies in components/data/charts/.
ChartSource = Literal["upstream", "vendored"]

#: The chart sources shipped in components/data/charts/ (`platform.charts: vendored`), one version each;
#: components/data/charts/SOURCES.md records their upstream repository, tag and commit.
VENDORED_CHARTS = {"gpuOperator": "v26.7.0", "certManager": "v1.21.1", "gatewayApi": "v1.5.1",
                   "kserve": "v0.20.0", "lws": "v0.8.0", "keda": "v2.18.0", "wva": "v0.7.0"}

#: Namespaces the upstream charts hard-code: KServe's CRDs name their conversion webhook
#: kserve/llmisvc-webhook-server-service and its presets live in `kserve`; the LWS CRD (crds/, not
#: templated) names lws-system/lws-webhook-service.
KSERVE_NAMESPACE = "kserve"
LWS_NAMESPACE = "lws-system"
#: KEDA's manifests create namespace `keda` and name it in their APIService, webhook and RoleBindings.
KEDA_NAMESPACE = "keda"
#: Where tkf-infra installs WVA: its chart takes the release namespace, and its own kustomize install uses this one.
WVA_NAMESPACE = "workload-variant-autoscaler-system"

#: Why render mode needs these pieces from local files (components/platform_charts.py and
#: components/prerequisites.py work around each; docs/platform.md).
RENDER_BLOCKERS = {"certManager": "its kubeVersion >= 1.22 gate; Helm assumes v1.20 offline",
                   "kserve": "the `lookup` in its CRD chart",
                   "gatewayApi": "the scope of its ValidatingAdmissionPolicy, which pulumi-kubernetes 4.25 asks a "
                                 "cluster for"}

#: Pieces whose charts create objects of another piece's kinds. The provider must know each object's
#: scope before it renders it; in render mode there is no cluster to ask, so it can learn a kind only
#: from a CRD registered in the same program: the other piece cannot be `alreadyInstalled` there.
NEEDS_CRDS_OF: dict[str, dict[str, str]] = {
    "kserve": {"certManager": "kserve-llmisvc-resources creates a cert-manager Issuer and Certificate "
                              "(cert-manager.io/v1)"},
}


def same_release(a: str, b: str) -> bool:
    """`0.8.0` and `v0.8.0` name one release (LWS publishes its chart as v0.8.0, and Helm accepts both)."""
    return a.removeprefix("v") == b.removeprefix("v")


def chart_dir(chart_path: str) -> Path:
    """A piece's `chartPath` as a directory: absolute, or relative to the project."""
    path = Path(chart_path).expanduser()
    return path if path.is_absolute() else PROJECT / path


def chart_path_problem(key: str, chart_path: str) -> str | None:
    """What is wrong with piece ``key``'s chartPath, checked at load: a wrong folder would otherwise fail
    deep in the provider, or (Gateway API, a folder of plain files) install nothing without a word."""
    where = f"platform.{key}.chartPath {chart_path!r}"
    fix = "write the path out (absolute, or relative to the project)"
    if not chart_path.isprintable():
        return f"{where} holds a control character (a line break?); {fix}"
    home = chart_path.split("/", 1)[0]
    try:
        folder = chart_dir(chart_path)
    except RuntimeError:  # Path.expanduser: no such user, or no home to expand a bare ~ to
        who = f"user {home[1:]!r} is not known on this machine" if home != "~" else "this process has no home"
        return f"{where} starts with {home}, but {who}; {fix}"
    if home.startswith("~") and not Path(home).expanduser().is_dir():
        return f"{where} starts with {home}, whose home directory {Path(home).expanduser()} does not exist; {fix}"
    try:
        if key == "gatewayApi":
            found = any("CustomResourceDefinition" in (text := f.read_text(errors="replace"))
                        and "gateway.networking.k8s.io" in text for f in folder.glob("*.yaml"))
            wanted = "a folder of Gateway API's standard-channel YAML files (its CRDs)"
        elif key == "keda":
            found = any("CustomResourceDefinition" in (text := f.read_text(errors="replace"))
                        and "scaledobjects.keda.sh" in text for f in folder.glob("*.yaml"))
            wanted = "a folder of KEDA's install YAML (its release's keda-<version>.yaml, with the keda.sh CRDs)"
        elif key == "kserve":
            found = all((folder / c / "Chart.yaml").is_file() for c in KSERVE_CHARTS)
            wanted = f"a folder holding KServe's {', '.join(KSERVE_CHARTS)} charts (KServe's charts/)"
        else:
            found, wanted = (folder / "Chart.yaml").is_file(), "a chart directory (one with a Chart.yaml)"
    except OSError as exc:
        return f"{where} ({folder}) cannot be read ({exc.strerror or exc}); fix its permissions or the path"
    if found:
        return None
    return (f"platform.{key}.chartPath {chart_path!r} ({folder}) is not {wanted}; fix the path, or remove "
            "chartPath to use platform.charts")
