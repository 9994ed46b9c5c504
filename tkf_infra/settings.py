"""Stack settings and the model catalog: the one place that knows their shape and their rules.

Why one module: every rule about the catalog (field ranges, cross-entry uniqueness, parallelism
arithmetic, node-pool fit) must give the same message whether it fires in `pulumi preview`, in a
unit test or in `python -m tkf_infra schema`. The stack-level settings are validated strictly (a
broken cluster or node-pool setting stops the run); catalog entries are validated one by one, so
a bad entry is rejected with its reasons while the healthy ones go on.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from tkf_infra.names import MAX_MODEL_NAME_LEN

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
HF_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
SERVED_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")

# vLLM flags the platform sets itself: letting a catalog entry pass them would silently fight the
# values the component renders (ports, auth, parallelism, the model path and its name).
PLATFORM_OWNED_FLAGS: dict[str, str] = {
    "--port": "the platform serves on port 8000",
    "--host": "the platform binds vLLM to all interfaces inside the pod",
    "--api-key": "the runtime API key comes from the `apiKey` secret stack setting",
    "--served-model-name": "set `servedName` instead",
    "--model": "set `repo` and `revision` instead",
    "--revision": "set `revision` instead",
    "--tensor-parallel-size": "set `tensorParallelSize` instead",
    "-tp": "set `tensorParallelSize` instead",
    "--pipeline-parallel-size": "set `pipelineParallelSize` instead",
    "-pp": "set `pipelineParallelSize` instead",
    "--data-parallel-size": "scale with `replicas` instead",
    "--download-dir": "weights come from the shared weight cache",
    "--max-model-len": "set `maxModelLen` instead",
    "--gpu-memory-utilization": "set `gpuMemoryUtilization` instead",
    "--dtype": "set `dtype` instead",
    "--quantization": "set `quantization` instead",
    "--kv-cache-dtype": "set `kvCacheDtype` instead",
    "--max-num-seqs": "set `maxNumSeqs` instead",
}


class _Model(BaseModel):
    """Base for every settings model: camelCase keys as in the stack file, unknown keys refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class Topology(StrEnum):
    SINGLE_GPU = "single-gpu"
    TENSOR_PARALLEL = "tensor-parallel"
    MULTI_NODE = "multi-node"
    CPU = "cpu"


class Backend(StrEnum):
    KSERVE = "kserve"
    VLLM = "vllm"


class Mode(StrEnum):
    CHAT = "chat"
    EMBEDDING = "embedding"
    RERANK = "rerank"


# ---------------------------------------------------------------------------------------------
# Stack-level settings
# ---------------------------------------------------------------------------------------------


class ClusterTarget(_Model):
    """Where manifests go: rendered to a directory (no cluster needed) or applied via kubeconfig."""

    mode: Literal["render", "kubeconfig"] = "render"
    render_dir: str = Field("rendered/dev", description="Directory for rendered manifests (mode render).")
    kubeconfig: str | None = Field(None, description="Path to a kubeconfig file (mode kubeconfig).")
    context: str | None = Field(None, description="kubeconfig context to use (mode kubeconfig).")
    cluster_identifier: str | None = Field(
        None, description="Stable cluster id: credential rotation then never replaces workloads."
    )
    skip_await: bool = Field(
        False,
        description="Do not wait for readiness. Only for test API servers that run no controllers.",
    )

    @model_validator(mode="after")
    def _kubeconfig_mode_needs_file(self) -> ClusterTarget:
        if self.mode == "kubeconfig" and not self.kubeconfig:
            raise ValueError("cluster.mode is 'kubeconfig' but cluster.kubeconfig is not set; give the path")
        return self


class Namespaces(_Model):
    serving: str = "llm-serving"
    gateway: str = Field("llm-gateway", description="Namespace of the LLM gateway: the only client allowed.")
    monitoring: str = Field("monitoring", description="Namespace whose Prometheus may scrape metrics.")
    gpu_operator: str = "gpu-operator"
    kserve: str = "kserve"
    lws: str = "lws-system"
    cert_manager: str = "cert-manager"


class Taint(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class NodePool(_Model):
    """A set of identical GPU nodes. `gpusPerNode: 0` marks a CPU pool (dev only)."""

    name: str
    kind: Literal["eks", "existing"] = "existing"
    gpu_product: str | None = Field(
        None, description="GPU model, e.g. H100-80GB or the GPU Operator label NVIDIA-H100-80GB-HBM3."
    )
    gpus_per_node: int = Field(ge=0, le=16)
    node_count: int = Field(1, ge=1, le=1000)
    gpu_memory_gib: float | None = Field(None, gt=0, alias="gpuMemoryGiB",
                                         description="Override the GPU table's memory.")
    labels: dict[str, str] = Field(default_factory=dict, description="Node selector labels.")
    taints: list[Taint] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list, description="Node names to label/taint (kind existing).")
    # EKS only
    cluster_name: str | None = None
    instance_type: str | None = None
    node_role_arn: str | None = None
    subnet_ids: list[str] = Field(default_factory=list)
    min_size: int | None = Field(None, ge=0)
    max_size: int | None = Field(None, ge=1)
    capacity_type: Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"] = "ON_DEMAND"
    ami_type: str = "AL2023_x86_64_NVIDIA"

    @field_validator("name")
    @classmethod
    def _pool_name(cls, v: str) -> str:
        if not DNS1035_RE.match(v) or len(v) > 40:
            raise ValueError(f"node pool name {v!r} must be a DNS-1035 label of at most 40 characters "
                             "(lowercase letters, digits and '-', starting with a letter)")
        return v

    @model_validator(mode="after")
    def _pool_rules(self) -> NodePool:
        if self.gpus_per_node > 0 and not self.gpu_product and self.kind == "existing":
            raise ValueError(
                f"node pool {self.name}: gpuProduct is required when gpusPerNode > 0 "
                "(e.g. H100-80GB); it is what the fit check sizes against"
            )
        if self.kind == "eks":
            missing = [k for k, v in (("instanceType", self.instance_type), ("clusterName", self.cluster_name),
                                      ("nodeRoleArn", self.node_role_arn)) if not v]
            if missing or not self.subnet_ids:
                missing += [] if self.subnet_ids else ["subnetIds"]
                raise ValueError(f"node pool {self.name}: kind eks needs {', '.join(missing)}")
        return self


class Component(_Model):
    """A platform piece: installed by us at a pinned version, or already installed by someone else."""

    already_installed: bool = Field(
        False, description="True: someone else installed it; tkf-infra registers nothing for it."
    )
    version: str | None = Field(None, description="Pinned chart/release version (required unless alreadyInstalled).")

    @field_validator("version")
    @classmethod
    def _pinned(cls, v: str | None) -> str | None:
        if v is not None and v.strip().lower() in {"", "latest", "*", "stable", "main", "master"}:
            raise ValueError(f"version {v!r} is not pinned; give an exact release such as v0.15.2")
        return v

    @model_validator(mode="after")
    def _version_when_installing(self) -> Component:
        if not self.already_installed and not self.version:
            raise ValueError("version is required when tkf-infra installs this piece; pin an exact release "
                             "(or set alreadyInstalled: true)")
        return self

    @property
    def pinned(self) -> str:
        """The pinned version; only meaningful when tkf-infra installs the piece."""
        return self.version or ""


class GpuOperatorSettings(Component):
    version: str | None = "v26.7.0"
    driver_enabled: bool = Field(True, description="False where nodes ship NVIDIA drivers.")
    toolkit_enabled: bool = True
    dcgm_exporter_enabled: bool = Field(True, description="Feeds GPU inventory and capacity data.")
    time_slicing_replicas: int = Field(0, ge=0, le=48, description="Device-plugin time-slicing; 0 = off.")
    mig_strategy: Literal["none", "single", "mixed"] = "none"


class Platform(_Model):
    gpu_operator: GpuOperatorSettings = Field(default_factory=lambda: GpuOperatorSettings())
    # Versions KServe v0.20.0 is tested with (shared/docs/serving-landscape.md, section 4).
    cert_manager: Component = Field(default_factory=lambda: Component(version="v1.17.0"))
    gateway_api: Component = Field(default_factory=lambda: Component(version="v1.5.1"))
    kserve: Component = Field(default_factory=lambda: Component(version="v0.20.0"))
    lws: Component = Field(default_factory=lambda: Component(version="0.8.0"))


class Serving(_Model):
    backend: Backend = Field(Backend.KSERVE, description="kserve (LLMInferenceService) or vllm (Deployment/LWS).")
    vllm_image: str = Field("vllm/vllm-openai:v0.11.0", description="GPU image; its tag is the vLLM version sized for.")
    vllm_cpu_image: str = Field("public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.11.0")
    allow_cpu: bool = Field(False, description="Allow the CPU profile (gpusPerNode 0). Dev stacks only.")
    storage_class: str | None = Field(None, description="StorageClass of weight-cache PVCs; None = cluster default.")
    weight_cache_headroom: float = Field(1.25, ge=1.0, le=4.0)
    prune_weight_cache: bool = Field(False, description="Delete a removed model's weight PVC (default: keep it).")
    protect: bool = Field(False, description="Protect PVCs and namespaces from deletion (prod).")
    api_key_env: str = Field("TKF_VLLM_API_KEY", description="Env var the gateway reads the runtime API key from.")

    @property
    def vllm_version(self) -> str:
        tag = self.vllm_image.rsplit(":", 1)[-1] if ":" in self.vllm_image.rsplit("/", 1)[-1] else "latest"
        return tag.lstrip("v")


# ---------------------------------------------------------------------------------------------
# Catalog entries
# ---------------------------------------------------------------------------------------------


class Cost(_Model):
    input_per_token: float = Field(0.0, ge=0, description="USD per input token; 0 = tracked, never limited.")
    output_per_token: float = Field(0.0, ge=0, description="USD per output token.")


class ModelEntry(_Model):
    """One served model. Defaults from `modelDefaults` are merged under it before validation."""

    name: str = Field(description="DNS-1035 name; prefixes every Kubernetes object of the model.")
    repo: str = Field(description="Hugging Face repo id, e.g. Qwen/Qwen2.5-7B-Instruct.")
    revision: str = Field(description="The 40-hex commit SHA to serve. Branches and tags are refused.")
    served_name: str = Field(description="Model name clients send; unique across the catalog.")
    node_pool: str | None = Field(None, description="Node pool to run on (not needed for the CPU profile).")
    topology: Topology | None = Field(None, description="Derived from the GPU counts when omitted.")
    node_count: int = Field(1, ge=1, le=64)
    gpus_per_node: int = Field(1, ge=0, le=16, description="0 = CPU profile (dev only).")
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    pipeline_parallel_size: int = Field(1, ge=1, le=64)
    replicas: int = Field(1, ge=0, le=100)
    max_model_len: int = Field(ge=16, le=10_485_760)
    gpu_memory_utilization: float = Field(0.9, gt=0.05, le=0.99)
    max_num_seqs: int = Field(256, ge=1, le=4096)
    max_num_batched_tokens: int | None = Field(None, ge=16)
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    quantization: Literal["awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "compressed-tensors", "mxfp4",
                          "bitsandbytes"] | None = None
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    enforce_eager: bool = False
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    mode: Mode = Mode.CHAT
    extra_args: list[str] = Field(default_factory=list, description="Extra vLLM flags.")
    hf_token_secret: str | None = Field(None, description="Secret (key HF_TOKEN) for gated repos.")
    cpu_kv_cache_gib: float = Field(4.0, gt=0, le=1024, alias="cpuKvCacheGiB",
                                    description="KV cache space of the CPU profile.")
    cost: Cost = Field(default_factory=lambda: Cost())

    @field_validator("name")
    @classmethod
    def _dns_name(cls, v: str) -> str:
        if not DNS1035_RE.match(v):
            raise ValueError(
                f"name {v!r} is not a DNS-1035 label: use lowercase letters, digits and '-', "
                "starting with a letter and ending with a letter or digit"
            )
        if len(v) > MAX_MODEL_NAME_LEN:
            raise ValueError(
                f"name {v!r} is {len(v)} characters; at most {MAX_MODEL_NAME_LEN} keep every generated "
                f"Kubernetes name within 63 characters. Shorten it"
            )
        return v

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, v: str) -> str:
        if not HF_REPO_RE.match(v):
            raise ValueError(f"repo {v!r} is not a Hugging Face repo id; write it as 'org/name'")
        return v

    @field_validator("revision")
    @classmethod
    def _pinned_revision(cls, v: str) -> str:
        if SHA_RE.match(v):
            return v
        if re.fullmatch(r"[0-9a-fA-F]{40}", v):
            raise ValueError(f"revision {v!r} has upper-case letters; write the commit SHA in lower case")
        if re.fullmatch(r"[0-9a-f]{7,39}", v):
            raise ValueError(
                f"revision {v!r} is an abbreviated commit; pin the full 40-character commit SHA"
            )
        if re.fullmatch(r"v?\d+(\.\d+)*.*", v):
            raise ValueError(f"revision {v!r} is a tag, which can move; pin the 40-character commit SHA")
        raise ValueError(f"revision {v!r} is a branch, which can move; pin the 40-character commit SHA")

    @field_validator("served_name")
    @classmethod
    def _served(cls, v: str) -> str:
        if not SERVED_NAME_RE.match(v):
            raise ValueError(
                f"servedName {v!r} is not allowed: use 1-128 letters, digits and . _ : / -"
            )
        return v

    @field_validator("extra_args")
    @classmethod
    def _no_platform_flags(cls, v: list[str]) -> list[str]:
        for arg in v:
            flag = arg.split("=", 1)[0]
            if flag in PLATFORM_OWNED_FLAGS:
                raise ValueError(
                    f"extraArgs contains {arg!r}, a flag the platform owns ({PLATFORM_OWNED_FLAGS[flag]}); "
                    "remove it"
                )
        return v

    @model_validator(mode="after")
    def _parallelism(self) -> ModelEntry:
        gpus = self.node_count * self.gpus_per_node
        if self.gpus_per_node == 0:
            if self.node_count != 1 or self.tensor_parallel_size != 1 or self.pipeline_parallel_size != 1:
                raise ValueError(
                    "the CPU profile (gpusPerNode 0) runs on one node without parallelism; "
                    "set nodeCount, tensorParallelSize and pipelineParallelSize to 1"
                )
        elif self.tensor_parallel_size * self.pipeline_parallel_size != gpus:
            raise ValueError(
                f"tensorParallelSize × pipelineParallelSize = {self.tensor_parallel_size} × "
                f"{self.pipeline_parallel_size} = {self.tensor_parallel_size * self.pipeline_parallel_size}, "
                f"but nodeCount × gpusPerNode = {self.node_count} × {self.gpus_per_node} = {gpus}; "
                "they must be equal"
            )
        if self.node_count > 1 and self.pipeline_parallel_size != self.node_count:
            raise ValueError(
                f"multi-node serving uses pipeline parallelism across nodes: pipelineParallelSize "
                f"({self.pipeline_parallel_size}) must equal nodeCount ({self.node_count}) and "
                f"tensorParallelSize must equal gpusPerNode ({self.gpus_per_node})"
            )
        derived = self.derived_topology
        if self.topology is not None and self.topology != derived:
            raise ValueError(
                f"topology {self.topology.value!r} does not match the GPU counts, which describe "
                f"{derived.value!r}; fix the counts or drop `topology` to derive it"
            )
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError("enableAutoToolChoice needs toolCallParser (e.g. hermes, llama3_json)")
        return self

    @property
    def derived_topology(self) -> Topology:
        if self.gpus_per_node == 0:
            return Topology.CPU
        if self.node_count > 1:
            return Topology.MULTI_NODE
        if self.gpus_per_node > 1:
            return Topology.TENSOR_PARALLEL
        return Topology.SINGLE_GPU

    @property
    def profile(self) -> Topology:
        return self.topology or self.derived_topology

    @property
    def is_cpu(self) -> bool:
        return self.gpus_per_node == 0

    @property
    def model_ref(self) -> str:
        return f"{self.repo}@{self.revision}"


class StackSettings(_Model):
    """Everything a stack file sets, except the catalog entries (validated one by one)."""

    cluster: ClusterTarget = Field(default_factory=lambda: ClusterTarget())
    namespaces: Namespaces = Field(default_factory=lambda: Namespaces())
    node_pools: list[NodePool] = Field(default_factory=list)
    platform: Platform = Field(default_factory=lambda: Platform())
    serving: Serving = Field(default_factory=lambda: Serving())
    prometheus_url: str | None = Field(None, description="Prometheus base URL for GPU inventory and status.")
    strict: bool = Field(False, description="True: any bad catalog entry stops the run before anything is registered.")
    model_defaults: dict[str, Any] = Field(default_factory=dict, description="Merged under every models[] entry.")
    models: list[Any] = Field(default_factory=list, description="The model catalog.")

    @field_validator("node_pools")
    @classmethod
    def _unique_pools(cls, v: list[NodePool]) -> list[NodePool]:
        seen: set[str] = set()
        for p in v:
            if p.name in seen:
                raise ValueError(f"node pool name {p.name!r} is used twice; names must be unique")
            seen.add(p.name)
        return v

    def pool(self, name: str | None) -> NodePool | None:
        return next((p for p in self.node_pools if p.name == name), None)


# ---------------------------------------------------------------------------------------------
# Errors and the validated catalog
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one field, phrased for the person editing the stack file."""

    where: str  # e.g. "models[3] qwen-72b" or "nodePools[0]"
    field: str  # e.g. "revision"
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.field}: {self.message}" if self.field else f"{self.where}: {self.message}"


@dataclass(frozen=True)
class Rejected:
    """A catalog entry left out of the deployment, with every reason at once."""

    index: int
    name: str
    problems: tuple[Problem, ...]

    def as_output(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "reasons": [str(p) for p in self.problems]}


class SettingsError(Exception):
    """Raised for stack settings that cannot be used at all (or any bad entry under `strict`)."""

    def __init__(self, problems: Sequence[Problem], headline: str = "the stack settings are invalid") -> None:
        self.problems = list(problems)
        self.headline = headline
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"{self.headline} ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


@dataclass(frozen=True)
class Catalog:
    """The validated result: settings, the entries that will be deployed, the ones left out."""

    settings: StackSettings
    models: tuple[ModelEntry, ...]
    rejected: tuple[Rejected, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.rejected


def _loc(loc: Sequence[int | str]) -> str:
    """Render a pydantic error location (aliases, i.e. the stack file's keys) as `a.b[0].c`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _problems_from(err: ValidationError, where: str, prefix: str = "") -> list[Problem]:
    problems = []
    for e in err.errors(include_url=False):
        path = _loc([p for p in e["loc"]])
        field_path = f"{prefix}.{path}" if prefix and path else (prefix or path)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            msg = "is required but missing; add it to the entry or to modelDefaults" if where.startswith(
                "models") else "is required but missing"
        elif e["type"] == "extra_forbidden":
            msg = (f"unknown key (value {_short(e.get('input'))}); "
                   "check the spelling against `python -m tkf_infra schema`")
        elif "input" in e and e["type"] not in {"value_error", "assertion_error"}:
            msg = f"{msg}; got {_short(e['input'])}"
        problems.append(Problem(where, field_path, msg))
    return problems


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `over` onto `base`; nested mappings merge, everything else (lists too) is replaced."""
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _entry_label(index: int, raw: Any) -> str:
    name = raw.get("name") if isinstance(raw, Mapping) else None
    return f"models[{index}] {name}" if isinstance(name, str) and name else f"models[{index}]"


def validate_catalog(raw: Mapping[str, Any]) -> Catalog:
    """Validate a whole stack document: settings strictly, then every catalog entry on its own.

    Raises SettingsError when the stack-level settings are unusable, or when `strict` is set and
    any entry is bad. Otherwise returns the entries that passed and the rejected ones.
    """
    if not isinstance(raw, Mapping):
        raise SettingsError([Problem("stack settings", "", f"expected a mapping of keys, got {_short(raw)}")])
    try:
        settings = StackSettings.model_validate(raw)
    except ValidationError as err:
        raise SettingsError(_problems_from(err, "stack settings")) from None

    per_entry: dict[int, list[Problem]] = {}
    parsed: dict[int, ModelEntry] = {}
    labels: dict[int, str] = {}
    for i, entry in enumerate(settings.models):
        labels[i] = _entry_label(i, entry)
        if not isinstance(entry, Mapping):
            per_entry[i] = [Problem(labels[i], "", f"expected a mapping of keys, got {_short(entry)}")]
            continue
        merged = deep_merge(settings.model_defaults, entry)
        try:
            parsed[i] = ModelEntry.model_validate(merged)
        except ValidationError as err:
            per_entry[i] = _problems_from(err, labels[i]) + _raw_parallelism_problems(merged, labels[i])

    _cross_entry_rules(settings, parsed, labels, per_entry)

    rejected = tuple(
        Rejected(i, str(settings.models[i].get("name", "")) if isinstance(settings.models[i], Mapping) else "",
                 tuple(per_entry[i]))
        for i in sorted(per_entry)
    )
    if rejected and settings.strict:
        raise SettingsError(
            [p for r in rejected for p in r.problems],
            headline="strict: true and the catalog has bad entries; nothing was registered",
        )
    good = tuple(parsed[i] for i in sorted(parsed) if i not in per_entry)
    return Catalog(settings=settings, models=good, rejected=rejected)


def _raw_parallelism_problems(raw: Mapping[str, Any], label: str) -> list[Problem]:
    """The GPU arithmetic rule, checked on the raw entry when other fields already failed.

    Pydantic runs cross-field rules only on entries whose fields all parsed; a person fixing a bad
    revision should also learn, in the same run, that their parallelism does not add up.
    """
    keys = ("nodeCount", "gpusPerNode", "tensorParallelSize", "pipelineParallelSize")
    values = [raw.get(k, 1) for k in keys]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return []
    nodes, gpus, tp, pp = values
    if gpus == 0 or tp * pp == nodes * gpus:
        return []
    return [Problem(label, "tensorParallelSize", f"tensorParallelSize × pipelineParallelSize = {tp} × {pp} = "
                    f"{tp * pp}, but nodeCount × gpusPerNode = {nodes} × {gpus} = {nodes * gpus}; they must be equal")]


def _cross_entry_rules(
    settings: StackSettings,
    parsed: Mapping[int, ModelEntry],
    labels: Mapping[int, str],
    per_entry: dict[int, list[Problem]],
) -> None:
    """Rules that need more than one entry, or the node pools: uniqueness, placement, CPU policy."""
    names: dict[str, int] = {}
    served: dict[str, int] = {}
    for i, m in sorted(parsed.items()):
        problems: list[Problem] = []
        if m.name in names:
            problems.append(Problem(labels[i], "name", f"{m.name!r} is already used by {labels[names[m.name]]}; "
                                    "names must be unique"))
        else:
            names[m.name] = i
        if m.served_name in served:
            problems.append(Problem(labels[i], "servedName", f"{m.served_name!r} is already served by "
                                    f"{labels[served[m.served_name]]}; servedName must be unique across the catalog"))
        else:
            served[m.served_name] = i
        if m.is_cpu:
            if not settings.serving.allow_cpu:
                problems.append(Problem(labels[i], "gpusPerNode", "0 selects the CPU profile, which this stack does "
                                        "not allow (serving.allowCpu is false); give the model GPUs"))
            if m.node_pool is not None:
                pool = settings.pool(m.node_pool)
                if pool is None:
                    problems.append(_unknown_pool(labels[i], m.node_pool, settings))
        else:
            pool = settings.pool(m.node_pool)
            if m.node_pool is None:
                problems.append(Problem(labels[i], "nodePool", "is required for a GPU model; "
                                        f"choose one of {_pool_names(settings)}"))
            elif pool is None:
                problems.append(_unknown_pool(labels[i], m.node_pool, settings))
            elif pool.gpus_per_node == 0:
                problems.append(Problem(labels[i], "nodePool", f"{pool.name!r} is a CPU pool; a model with "
                                        f"gpusPerNode {m.gpus_per_node} needs a GPU pool"))
            else:
                if m.gpus_per_node > pool.gpus_per_node:
                    problems.append(Problem(labels[i], "gpusPerNode", f"{m.gpus_per_node} but node pool "
                                            f"{pool.name!r} has {pool.gpus_per_node} GPUs per node; lower it or "
                                            "use a bigger pool"))
                if m.node_count > pool.node_count:
                    problems.append(Problem(labels[i], "nodeCount", f"{m.node_count} but node pool {pool.name!r} "
                                            f"has {pool.node_count} nodes"))
        if problems:
            per_entry.setdefault(i, []).extend(problems)


def _pool_names(settings: StackSettings) -> str:
    return ", ".join(repr(p.name) for p in settings.node_pools) or "(none: add nodePools to the stack)"


def _unknown_pool(label: str, name: str, settings: StackSettings) -> Problem:
    return Problem(label, "nodePool",
                   f"{name!r} is not a node pool of this stack; choose one of {_pool_names(settings)}")


# Configuration keys of the project namespace, in the order `Pulumi.yaml` documents them.
CONFIG_KEYS: tuple[str, ...] = (
    "cluster", "namespaces", "nodePools", "platform", "serving", "prometheusUrl", "strict",
    "modelDefaults", "models",
)


def catalog_json_schema() -> dict[str, Any]:
    """JSON Schema of a stack's `tkf-infra:` settings, with entries typed, for editors."""
    schema = StackSettings.model_json_schema(by_alias=True)
    entry = ModelEntry.model_json_schema(by_alias=True)
    defs = schema.setdefault("$defs", {})
    defs.update(entry.pop("$defs", {}))
    defs["ModelEntry"] = entry
    schema["properties"]["models"] = {"type": "array", "items": {"$ref": "#/$defs/ModelEntry"},
                                      "description": "The model catalog: one served model per entry."}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "tkf-infra stack settings"
    return schema


def read_stack_file(path: Path) -> dict[str, Any]:
    """The `tkf-infra:` settings of a committed `Pulumi.<stack>.yaml`, without secrets.

    For tools that work from the stack file itself (the lock command, tests), not from the engine.
    """
    import yaml

    cfg = (yaml.safe_load(path.read_text()) or {}).get("config", {}) or {}
    return {k.split(":", 1)[1]: v for k, v in cfg.items()
            if k.startswith("tkf-infra:") and not (isinstance(v, dict) and "secure" in v)}


def read_pulumi_config() -> dict[str, Any]:
    """The stack's `tkf-infra:*` keys as one document, ready for `validate_catalog`.

    The only function that reads pulumi.Config. A malformed structured value (bad JSON/YAML
    shape) becomes a SettingsError naming the key, never a traceback.
    """
    import pulumi  # local: the rest of this module must stay importable without the engine

    config = pulumi.Config()
    doc: dict[str, Any] = {}
    problems: list[Problem] = []
    for key in CONFIG_KEYS:
        try:
            value: Any
            if key == "prometheusUrl":
                value = config.get(key) or None
            elif key == "strict":
                value = config.get_bool(key)
            else:
                value = config.get_object(key)
        except Exception as err:  # ConfigTypeError and JSON errors carry the reason
            problems.append(Problem(f"tkf-infra:{key}", "", f"cannot be read as structured config: {err}"))
            continue
        if value is not None:
            doc[key] = value
    if problems:
        raise SettingsError(problems, headline="the stack file has malformed settings")
    return doc
