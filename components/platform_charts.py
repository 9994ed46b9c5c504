"""Where each platform chart comes from, and how it is registered: ``kubernetes.helm.v4.Chart``.

Why Chart v4 and not ``helm.v3.Release``: the provider renders the chart client-side and registers
every object as a resource of its own (its own diff, drift and `refresh`), CRDs included, so custom
resources later in the program preview on a fresh cluster (pulumi-kubernetes 4.25 cannot see the
CRDs inside a Release: "failed to determine if the following GVK is namespaced"), and render mode
writes every object to the directory. What it does not do (hooks) is in docs/platform.md.

Sources: each piece's upstream repository at its pinned version by default; the copies shipped in
``components/data/charts/`` with ``platform.charts: vendored`` (render mode's default); or a
``chartPath`` of the site's own. Chart v4 cannot render two of the charts without a cluster, so in
render mode (and only there) each gets a stand-in that yields the same objects — see
`render_shim_chart` and `static_crd_files`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tkf_infra.config import Component
from tkf_infra.config.charts import VENDORED_CHARTS, ChartSource, chart_dir

VENDORED = Path(__file__).resolve().parent / "data" / "charts"

#: Upstream coordinates: (chart or OCI reference, Helm repository or None for OCI).
UPSTREAM: dict[str, tuple[str, str | None]] = {
    "gpu-operator": ("gpu-operator", "https://helm.ngc.nvidia.com/nvidia"),
    "cert-manager": ("cert-manager", "https://charts.jetstack.io"),
    "kserve-llmisvc-crd": ("oci://ghcr.io/kserve/charts/kserve-llmisvc-crd", None),
    "kserve-llmisvc-resources": ("oci://ghcr.io/kserve/charts/kserve-llmisvc-resources", None),
    "kserve-runtime-configs": ("oci://ghcr.io/kserve/charts/kserve-runtime-configs", None),
    "lws": ("oci://registry.k8s.io/lws/charts/lws", None),
    # WVA's release job pushes its chart here (.github/workflows/helm-release.yaml: `helm push ... oci://ghcr.io/llm-d`).
    "workload-variant-autoscaler": ("oci://ghcr.io/llm-d/workload-variant-autoscaler", None),
}
#: Gateway API ships no chart: its standard channel is a set of YAML files (CRDs plus the
#: safe-upgrades ValidatingAdmissionPolicy), published together as standard-install.yaml.
GATEWAY_API_URL = "https://github.com/kubernetes-sigs/gateway-api/releases/download/{version}/standard-install.yaml"
#: KEDA ships no chart in its repository: its release asset is one YAML file, `kustomize build config/default`
#: with the release's images (components/data/charts/SOURCES.md); `{version}` without the leading v.
KEDA_URL = "https://github.com/kedacore/keda/releases/download/v{version}/keda-{version}.yaml"
#: Piece (stack-file key) → chart folder inside its vendored directory (KServe: a folder of charts;
#: Gateway API and KEDA: a folder of YAML files).
VENDORED_FOLDERS = {"gpuOperator": "gpu-operator-{v}/gpu-operator", "certManager": "cert-manager-{v}/cert-manager",
                    "gatewayApi": "gateway-api-{v}/standard", "kserve": "kserve-{v}", "lws": "lws-{v}/lws",
                    "keda": "keda-{v}", "wva": "wva-{v}/workload-variant-autoscaler"}


@dataclass(frozen=True)
class ChartSpec:
    """What Chart v4 is given: a local directory (``local``) or an upstream chart at a version."""

    chart: str
    version: str | None = None
    repo: str | None = None
    local: bool = False


def local_dir(key: str, piece: Component, source: ChartSource) -> Path | None:
    """The piece's local folder (its chartPath, else the vendored copy), or None for upstream."""
    if piece.chart_path:
        return chart_dir(piece.chart_path)
    if source == "vendored":
        return VENDORED / VENDORED_FOLDERS[key].format(v=VENDORED_CHARTS[key])
    return None


def chart_spec(key: str, chart: str, piece: Component, source: ChartSource) -> ChartSpec:
    """``chart`` of piece ``key`` (for KServe one of its three charts) from wherever the settings say."""
    folder = local_dir(key, piece, source)
    if folder is not None:
        return ChartSpec(str(folder / chart if key == "kserve" else folder), local=True)
    ref, repo = UPSTREAM[chart]
    return ChartSpec(ref, piece.pinned, repo)


def helm_chart(name: str, release: str, spec: ChartSpec, namespace: str, values: dict[str, Any], *,
               skip_await: bool, opts: pulumi.ResourceOptions,
               post_renderer: k8s.helm.v4.PostRendererArgs | None = None) -> k8s.helm.v4.Chart:
    """``release`` is the Helm release name the templates see: object names derive from it. ``post_renderer``:
    a program Helm pipes the rendered manifests through (components/helm_drop_kinds.py)."""
    return k8s.helm.v4.Chart(
        name,
        name=release,
        chart=spec.chart,
        version=spec.version,
        repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=spec.repo) if spec.repo else None,
        namespace=namespace,
        values=values,
        skip_await=skip_await,
        post_renderer=post_renderer,
        opts=opts,
    )


# ------------------------------------------------------------------------------------------------
# Render mode: the two charts Chart v4 cannot render without a cluster
# ------------------------------------------------------------------------------------------------


def render_shim_chart(chart_dir: Path, name: str) -> str:
    """A parent chart whose only dependency is ``chart_dir`` (a symlink under ``charts/``).

    Why: offline, Helm assumes Kubernetes v1.20.0 (pulumi-kubernetes builds Helm without the version
    ldflags and Chart v4 has no kubeVersion argument), and cert-manager's Chart.yaml requires
    ``>= 1.22.0-0``. Helm checks ``kubeVersion`` of the top-level chart only, and cert-manager's
    templates do not read ``.Capabilities``, so as a subchart it renders the same objects: same
    release name and namespace, same ``.Chart`` inside its templates. Values go under ``name:``.
    The shim lives in the temp directory under a name derived from the chart's path (stable across runs).
    """
    target = chart_dir.resolve()
    digest = hashlib.sha256(str(target).encode()).hexdigest()[:12]
    shim = Path(tempfile.gettempdir()) / "tkf-infra-chart-shims" / f"{name}-{digest}"
    (shim / "charts").mkdir(parents=True, exist_ok=True)
    (shim / "Chart.yaml").write_text(
        f"apiVersion: v2\nname: {name}-render\nversion: 0.0.0\n"
        f"description: render-mode parent of {target} (components/platform_charts.py)\n")
    link = shim / "charts" / name
    if not (link.is_symlink() and Path(os.readlink(link)) == target):
        link.unlink(missing_ok=True)
        link.symlink_to(target, target_is_directory=True)
    return str(shim)


def static_crd_files(chart_dir: Path) -> list[str]:
    """The objects kserve-llmisvc-crd renders, read from its files.

    Why: its ClusterStorageContainer CRD template calls Helm ``lookup``, which Chart v4 sends to a
    cluster (server dry-run) and which fails outright offline. The template renders that CRD unless a
    *Helm* release other than this one owns it (Pulumi never sets Helm's ownership annotation), and the
    other templates are plain YAML: ``templates/`` files without template directives plus ``files/``.
    A template with directives anywhere else is refused, so a newer chart cannot silently change this.
    """
    files: list[str] = []
    for path in sorted((chart_dir / "templates").glob("*.yaml")):
        text = path.read_text()
        if "{{" not in text:
            files.append(str(path))
        elif "lookup" not in text or ".Files.Get" not in text:
            raise pulumi.RunError(f"{path} is a template this render-mode stand-in does not understand; render "
                                  "KServe against a cluster (cluster.mode: kubeconfig) or mark it alreadyInstalled")
    files += [str(p) for p in sorted((chart_dir / "files").glob("*.yaml"))]
    return files


def config_group(name: str, files: Sequence[str], *, skip_await: bool,
                 opts: pulumi.ResourceOptions) -> k8s.yaml.v2.ConfigGroup:
    """Plain YAML through the same client-side machinery as Chart v4 (every object its own resource)."""
    return k8s.yaml.v2.ConfigGroup(name, files=list(files), skip_await=skip_await, opts=opts)
