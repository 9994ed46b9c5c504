"""Stack-level settings: the cluster target, namespaces, node pools, platform pieces and serving defaults.

Why strict, field by field: a broken cluster or namespace setting breaks every model, so it stops
the run at load with every problem at once (key path, value, fix) — never a traceback from deep in
a component, never an object the API server refuses at apply. Node pools are the exception: a bad
pool refuses only the models placed on it (`tkf_infra.config.validate`).
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import Field, ValidationInfo, field_validator, model_validator

from tkf_infra.config import kube_syntax as ks
from tkf_infra.config.base import SettingsModel, did_you_mean, keys_of, problem_check
from tkf_infra.config.catalog import Backend, ModelEntry
from tkf_infra.config.charts import (
    KSERVE_NAMESPACE,
    LWS_NAMESPACE,
    NEEDS_CRDS_OF,
    RENDER_BLOCKERS,
    VENDORED_CHARTS,
    ChartSource,
    chart_path_problem,
    same_release,
)
from tkf_infra.config.platform import Platform, installed_pieces
from tkf_infra.config.prometheus_auth import PrometheusAuth
from tkf_infra.config.quantity import gib_number
from tkf_infra.config.scaling import Overcommit

#: The vLLM release the platform deploys and the fit check sizes for: the one pin. The images below
#: are derived from it; what cannot import Python (requirements-vllm.txt for the test tier, the
#: committed stack files) must agree with it, and tests/test_vllm_pin.py fails until they do.
VLLM_RELEASE = "0.32.0"
#: Upstream's images (docs.vllm.ai, "Using Docker"): GPU on Docker Hub, CPU on the public ECR release repo.
VLLM_GPU_IMAGE = f"vllm/vllm-openai:v{VLLM_RELEASE}"
VLLM_CPU_IMAGE = f"public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v{VLLM_RELEASE}"

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")
#: A chart or release version: semantic versioning, optionally with a leading v (v1.21.1, 0.8.0, v0.20.0-rc1).
_FLOATING_TAGS = {"", "latest", "nightly", "main", "master", "stable", "dev"}
#: An IAM role ARN (role names and paths: letters, digits and + = , . @ _ -, IAM's own rule) and a subnet id.
#: An image reference or a URL: printable ASCII without spaces (a line break would reach the pod spec or httpx).
_IMAGE_RE = re.compile(r"[!-~]+")


class ClusterTarget(SettingsModel):
    """Where manifests go: rendered to a directory (no cluster needed) or applied via kubeconfig."""

    mode: Literal["render", "kubeconfig"] = "render"
    render_dir: str = Field("rendered/dev", description="Directory for rendered manifests (mode render).")
    kubeconfig: str | None = Field(None, description="Path to a kubeconfig file (mode kubeconfig).")
    context: str | None = Field(None, description="kubeconfig context to use (mode kubeconfig).")
    cluster_identifier: str | None = Field(
        None, description="Stable cluster id: credential rotation then never replaces workloads.")
    skip_await: bool = Field(
        False, description="Do not wait for readiness. Only for test API servers that run no controllers.")
    ready_timeout_seconds: int | None = Field(
        None, ge=60, le=86_400,
        description="How long `up` waits for each model to be Ready before it names that model as failed (the "
                    "others still deploy). Default per model: its download at 100 MiB/s + its start-up probe's "
                    "budget + 10 min. Set it to gate a CI deploy on a shorter wait.")

    @field_validator("render_dir", "kubeconfig", "context", "cluster_identifier")
    @classmethod
    def _not_blank(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not v.isprintable():
            raise ValueError(f"{v!r} holds a control character (a line break?), which no path or name has; "
                             "remove it")
        if info.field_name == "cluster_identifier":
            return v
        if v is not None and not v.strip():
            raise ValueError("is empty: give a value, or remove the key to use the default")
        if v is not None and info.field_name != "render_dir" and info.data.get("mode") == "render":
            raise ValueError(f"{v!r} names a cluster, but cluster.mode is 'render' (manifests are written to "
                             "cluster.renderDir, nothing is applied): set mode: kubeconfig to deploy there, or "
                             "remove the key")
        return v

    @model_validator(mode="after")
    def _kubeconfig_mode_needs_file(self) -> ClusterTarget:
        if self.mode == "kubeconfig" and not self.kubeconfig:
            raise ValueError("cluster.mode is 'kubeconfig' but cluster.kubeconfig is not set; give the path")
        return self


def _namespace(v: str) -> str:
    if not ks.DNS1123_LABEL_RE.fullmatch(v) or len(v) > 63:
        fixed = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", v.lower())).strip("-")[:63] or "my-namespace"
        raise ValueError(f"{v!r} is not a Kubernetes namespace name (a DNS-1123 label: at most 63 lowercase "
                         "letters, digits and '-', starting and ending with a letter or digit), so the API "
                         f"server would refuse it at apply; use e.g. {fixed!r}")
    return v


class Namespaces(SettingsModel):
    """Where things run; the serving namespace must be apart from the gateway's and monitoring's, since
    the NetworkPolicy admits those two whole namespaces to the serving port."""

    serving: str = "llm-serving"
    gateway: str = Field("llm-gateway", description="Namespace of the LLM gateway: the only client allowed.")
    monitoring: str = Field("monitoring", description="Namespace whose Prometheus may scrape metrics.")
    gpu_operator: str = "gpu-operator"
    kserve: str = "kserve"
    lws: str = "lws-system"
    cert_manager: str = "cert-manager"

    @field_validator("*")
    @classmethod
    def _dns(cls, v: str) -> str:
        return _namespace(v)

    @model_validator(mode="after")
    def _serving_apart(self) -> Namespaces:
        for key, value in (("gateway", self.gateway), ("monitoring", self.monitoring)):
            if value == self.serving:
                raise ValueError(f"namespaces.{key} is {value!r}, the serving namespace too: the NetworkPolicy admits "
                                 f"every pod of namespaces.{key} to the models, so every pod next to the models could "
                                 f"call them; give namespaces.{key} a namespace of its own")
        if self.gpu_operator == self.serving:
            raise ValueError(f"namespaces.gpuOperator is {self.gpu_operator!r}, the serving namespace too: the GPU "
                             "Operator's namespace is labelled pod-security.kubernetes.io/enforce: privileged (its "
                             "pods need the host), so any pod next to the models could run privileged; give "
                             "namespaces.gpuOperator a namespace of its own (default gpu-operator)")
        return self


def image_version(image: str) -> str | None:
    """The release an image tag names (`vllm/vllm-openai:v0.32.0` → `0.32.0`); None if it names none."""
    last = image.rsplit("/", 1)[-1].split("@", 1)[0]
    tag = last.rsplit(":", 1)[1] if ":" in last else ""
    match = _VERSION_RE.match(tag)
    return ".".join(g or "0" for g in match.groups()) if match else None


def release_of(text: str) -> str | None:
    """A release as `image_version` writes it (`v0.32` → `0.32.0`); None when the text names none."""
    match = _VERSION_RE.match(text.strip())
    return ".".join(g or "0" for g in match.groups()) if match else None


def _pinned_image(key: str, v: str) -> str:
    if not _IMAGE_RE.fullmatch(v):
        raise ValueError(f"{v!r} is not an image reference (printable characters without spaces, e.g. "
                         f"{VLLM_GPU_IMAGE}); fix {key}")
    last = v.rsplit("/", 1)[-1]
    tag = last.split("@", 1)[0].rsplit(":", 1)[1] if ":" in last.split("@", 1)[0] else ""
    if tag.lower() in _FLOATING_TAGS and "@sha256:" not in v:
        shown = f"tag {tag!r}" if tag else "no tag"
        raise ValueError(f"{v!r} has {shown}, which can move to another vLLM release under the fit check; pin a "
                         f"release tag such as vllm/vllm-openai:v0.19.0 (set {key})")
    return v


class Serving(SettingsModel):
    backend: Backend = Field(Backend.KSERVE, description="kserve (LLMInferenceService) or vllm (Deployment/LWS).")
    vllm_image: str = Field(VLLM_GPU_IMAGE, description="GPU image; its tag is the vLLM version sized for.")
    vllm_cpu_image: str = Field(VLLM_CPU_IMAGE, description="CPU image (dev only); same vLLM release as vllmImage.")
    vllm_version: str | None = Field(
        None, description="The vLLM release inside vllmImage, when its tag does not say (e.g. a digest).")
    allow_cpu: bool = Field(False, description="Allow the CPU profile (gpusPerNode 0). Dev stacks only.")
    storage_class: str | None = Field(None, description="StorageClass of weight-cache PVCs; None = cluster default.")
    storage_multi_node: bool | None = Field(
        None, description="Whether pods on several nodes can mount one volume of storageClass (ReadWriteMany: EFS, "
                          "FSx for Lustre, NFS, CephFS). false for block and node-local classes (EBS, local-path, "
                          "TopoLVM): every reader of a weight cache then runs on the cache's node, or is refused. "
                          "true: a new weight cache is ReadWriteMany from its first reader (an existing claim "
                          "keeps its mode). None: read from the cluster's StorageClass provisioner, else not "
                          "checked.")
    weight_cache_headroom: float = Field(1.25, ge=1.0, le=4.0)
    weight_cache_budget_gib: float | None = Field(
        None, gt=0, alias="weightCacheBudgetGiB",
        description="GiB the weight caches may still claim on storageClass, where no API says (render mode, no "
                    "CSIStorageCapacity and no storage quota); caches beyond it are refused: the last deployed models "
                    "are admitted first, then by `priority`, then catalog order.")
    overcommit: Overcommit = Field(
        Overcommit.REFUSE, description="refuse: an autoscaled model whose maxReplicas does not fit is left out. "
                                       "allow: it is admitted with room for minReplicas, and a warning says how "
                                       "many replicas the autoscaler may ask for that would sit Pending.")
    scrape_seconds: int = Field(
        30, ge=1, le=600, description="How often the stack's Prometheus scrapes vLLM and the gateway (its scrape "
                                      "interval): how late an autoscaler can see a signal, which bounds a model's "
                                      "published cold start.")
    prometheus_auth: PrometheusAuth | None = Field(
        None, description="How KEDA authenticates to prometheusUrl (both backends' autoscalers): authModes and an "
                          "existing TriggerAuthentication, or insecureSkipVerify (docs/scaling.md).")
    prune_weight_cache: bool = Field(False, description="Delete a removed model's weight PVC (default: keep it).")
    protect: bool = Field(False, description="Protect PVCs and namespaces from deletion (prod).")
    api_key_env: str = Field("TKF_VLLM_API_KEY", description="Env var the gateway reads the runtime API key from.")
    await_weight_download: bool | None = Field(
        None, description="Wait in `up` for each weight download (timeout from the checkpoint size), so a failed "
                          "download fails its models and their workloads are not created. Default: wait, unless "
                          "cluster.skipAwait. False: `up` returns once the objects exist; pods wait for the weights.")

    _gib = field_validator("weight_cache_budget_gib", mode="before")(gib_number)

    @field_validator("vllm_image")
    @classmethod
    def _gpu_image(cls, v: str) -> str:
        return _pinned_image("serving.vllmImage", v)

    @field_validator("vllm_cpu_image")
    @classmethod
    def _cpu_image(cls, v: str) -> str:
        return _pinned_image("serving.vllmCpuImage", v)

    @field_validator("vllm_version")
    @classmethod
    def _version_text(cls, v: str | None) -> str | None:
        if v is not None and (not v.isprintable() or not v.strip()):
            raise ValueError(f"{v!r} is not a vLLM release; write it like 0.32.0 (or unknown-v1), without control "
                             "characters")
        return v

    _storage_class = problem_check("storage_class", check=partial(ks.subdomain_problem, what="StorageClass name"))
    _env_name = problem_check("api_key_env", check=ks.env_name_problem)

    @model_validator(mode="after")
    def _version_known(self) -> Serving:
        tagged = image_version(self.vllm_image)
        if self.vllm_version is None and tagged is None:
            raise ValueError(f"vllmImage {self.vllm_image!r} does not name a vLLM release in its tag, and the fit "
                             "check sizes per release; tag it like v0.19.0 or set serving.vllmVersion")
        if self.vllm_version is not None and tagged is not None and release_of(self.vllm_version) != tagged:
            # The pods run the tag's release; the fit check would size the other one.
            raise ValueError(f"serving.vllmVersion {self.vllm_version!r} contradicts serving.vllmImage "
                             f"{self.vllm_image!r}, whose tag is vLLM {tagged}: the pods run {tagged} while the fit "
                             f"check would size {self.vllm_version!r}; remove vllmVersion (the tag says the release) "
                             "or fix the image tag")
        return self

    @property
    def version(self) -> str:
        """The vLLM release the fit check sizes for."""
        return self.vllm_version or image_version(self.vllm_image) or ""


def _url(v: str | None) -> str | None:
    if v in (None, ""):
        return None
    parsed = urlparse(str(v))  # which drops tabs and line breaks: refuse them first (they would reach httpx)
    if not _IMAGE_RE.fullmatch(str(v)) or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{v!r} is not an http(s) URL; write it like http://prometheus-k8s.monitoring.svc:9090 "
                         "(or leave it empty to skip the live checks)")
    try:
        port = parsed.port  # urllib's own rule: ValueError past 65535 or for a port that is no number
    except ValueError:
        port = 0
    if not parsed.hostname:
        raise ValueError(f"{v!r} names no host; write it like http://prometheus-k8s.monitoring.svc:9090")
    if port == 0:
        raise ValueError(f"{v!r} has port {parsed.netloc.rpartition(':')[2]!r}: a URL's port is a number from 1 to "
                         "65535 (Prometheus listens on 9090 by default); fix it, or leave the port out for the "
                         "scheme's own")
    return str(v).rstrip("/")


class StackSettings(SettingsModel):
    """Everything a stack file sets. Pools and catalog entries stay raw here: each is validated on its own."""

    cluster: ClusterTarget = Field(default_factory=lambda: ClusterTarget())
    namespaces: Namespaces = Field(default_factory=lambda: Namespaces())
    node_pools: list[Any] = Field(default_factory=list, description="GPU node pools (see NodePool).")
    platform: Platform = Field(default_factory=lambda: Platform())
    serving: Serving = Field(default_factory=lambda: Serving())
    prometheus_url: str | None = Field(None, description="Prometheus base URL for GPU inventory and status.")
    strict: bool = Field(False, description="True: any bad catalog entry stops the run before anything is registered, "
                                           "and a model whose fit is tight (docs/sizing.md) is refused.")
    model_defaults: dict[str, Any] = Field(default_factory=dict, description="Merged under every models[] entry.")
    models: list[Any] = Field(default_factory=list, description="The model catalog.")
    layer: Literal["all", "fleet"] = Field(
        "all", description="all: this stack holds the platform and the fleet (one stack). fleet: the environment is "
        "split (docs/stacks.md): this stack holds the models and reads the platform from stack <this stack>-platform, "
        "which is applied from the platform keys of this same file.")

    @field_validator("prometheus_url")
    @classmethod
    def _prom(cls, v: str | None) -> str | None:
        return _url(v)

    @field_validator("model_defaults")
    @classmethod
    def _defaults_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        """A key no entry has would be reported once per model; it is one mistake, in one place."""
        known = {f.alias or n for n, f in ModelEntry.model_fields.items()} | set(ModelEntry.model_fields)
        unknown = sorted(k for k in v if k not in known)
        if unknown:
            hints = "".join(f"{k!r}: {hint}" for k in unknown if (hint := did_you_mean(k, keys_of(ModelEntry))))
            raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}: modelDefaults takes the keys of a "
                             f"models[] entry; {hints}check the spelling against `python -m tkf_infra schema`")
        return v

    def _wva_prometheus_problem(self) -> str | None:
        """WVA reads every signal from Prometheus and exits at start without an https one (v0.7.0's cmd/main.go
        `ValidateTLSConfig`: "HTTPS is required"), so its pods would crash-loop while `up` reported success."""
        if self.prometheus_url is None:
            return ("platform.wva is set, so tkf-infra installs llm-d's Workload Variant Autoscaler, which reads "
                    "vLLM's metrics from Prometheus and does not start without one, but the stack sets no "
                    "prometheusUrl; set tkf-infra:prometheusUrl (an https:// URL of the Prometheus that scrapes "
                    "the serving namespace and WVA) or remove platform.wva")
        if urlparse(self.prometheus_url).scheme != "https":
            return (f"platform.wva is set, but prometheusUrl {self.prometheus_url!r} is not https: WVA v0.7.0 exits at "
                    "start on any other scheme (\"HTTPS is required\"); give the https:// endpoint of that Prometheus "
                    "(or a TLS proxy in front of it), or remove platform.wva")
        return None

    @property
    def awaits_weight_download(self) -> bool:
        """Whether `up` waits for the download Jobs: only against a cluster, by default unless skipAwait."""
        wanted = self.serving.await_weight_download
        return self.cluster.mode == "kubeconfig" and (not self.cluster.skip_await if wanted is None else wanted)

    @property
    def chart_source(self) -> ChartSource:
        """`platform.charts`, defaulting to the offline copies where no cluster is involved (render mode)."""
        return self.platform.charts or ("vendored" if self.cluster.mode == "render" else "upstream")

    @model_validator(mode="after")
    def _platform_fits_its_charts(self) -> StackSettings:
        """What the upstream charts impose, said at load rather than by the API server or a chart render."""
        installed = installed_pieces(self.platform, self.serving.backend)
        problems = []
        for key, field, fixed in (("kserve", "kserve", KSERVE_NAMESPACE), ("lws", "lws", LWS_NAMESPACE)):
            actual = getattr(self.namespaces, field)
            if key in installed and actual != fixed:
                problems.append(f"namespaces.{field} is {actual!r}, but the {key} charts hard-code namespace "
                                f"{fixed!r} (webhook and CRD references); keep {fixed!r}, or set "
                                f"platform.{key}.alreadyInstalled: true for an installation of your own")
        if "wva" in installed and (problem := self._wva_prometheus_problem()):
            problems.append(problem)
        source = self.chart_source
        for key, c in installed.items():
            if c.chart_path and (problem := chart_path_problem(key, c.chart_path)):
                problems.append(problem)
            if source == "vendored" and not c.chart_path and not same_release(c.pinned, VENDORED_CHARTS[key]):
                problems.append(f"platform.{key}.version is {c.version!r} but the vendored chart is "
                                f"{VENDORED_CHARTS[key]}; pin {VENDORED_CHARTS[key]}, give the piece a chartPath, "
                                "or set platform.charts: upstream")
            if (self.cluster.mode == "render" and key in RENDER_BLOCKERS and source == "upstream"
                    and not c.chart_path):
                problems.append(f"render mode cannot template {key} from its repository (no cluster to answer "
                                f"{RENDER_BLOCKERS[key]}); use platform.charts: vendored or "
                                f"platform.{key}.chartPath, or set platform.{key}.alreadyInstalled: true")
            for other, why in NEEDS_CRDS_OF.get(key, {}).items():
                if self.cluster.mode == "render" and other not in installed:
                    problems.append(f"platform.{other}.alreadyInstalled is true in render mode, but {why}, a kind "
                                    f"the provider learns only from {other}'s CRDs, and render mode has no cluster "
                                    f"to read them from: let tkf-infra render {other} too (remove "
                                    f"alreadyInstalled), set platform.{key}.alreadyInstalled: true as well, or "
                                    "deploy to a cluster that has them (cluster.mode: kubeconfig)")
        if problems:
            raise ValueError("; ".join(problems))
        return self
