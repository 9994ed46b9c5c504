"""A node pool in the stack settings: its GPUs, labels, taints, node figures and (for EKS) its AWS facts.

Why a module of its own: a pool is the one stack-level setting whose problems do not stop the run —
a bad pool refuses only the models placed on it (`tkf_infra.config.validate`) — and its rules (GPU
product, MIG, node names, the EKS role and subnets) are the largest block of the settings.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from tkf_infra.config import kube_syntax as ks
from tkf_infra.config.base import SettingsModel, problem_check
from tkf_infra.config.catalog import DNS1035_RE
from tkf_infra.config.quantity import gib_number, parse_quantity, unit_problem

_ROLE_ARN_RE = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+", re.ASCII)
_SUBNET_RE = re.compile(r"subnet-[0-9a-f]+")


class Taint(SettingsModel):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"

    _key = problem_check("key", check=ks.label_key_problem)
    _value = problem_check("value", check=ks.label_value_problem)


class NodeResources(SettingsModel):
    """What one node of a pool gives pods (its allocatable), for previews that cannot read the Nodes."""

    cpu: str | float = Field(description="CPU cores, e.g. 191.45 or 191450m.")
    memory: str | float = Field(description="Memory, e.g. 2000Gi.")
    ephemeral_storage: str | float | None = Field(None, description="Ephemeral storage, e.g. 3500Gi.")
    pods: int | None = Field(None, ge=1, description="Pods per node (kubelet maxPods).")

    @field_validator("cpu", "memory", "ephemeral_storage")
    @classmethod
    def _quantity(cls, v: str | float | None, info: ValidationInfo) -> str | float | None:
        if v is None:
            return v
        if parse_quantity(v) <= 0:
            raise ValueError(f"{v!r} must be above 0")
        if problem := unit_problem(v, "cores" if info.field_name == "cpu" else "bytes"):
            raise ValueError(problem)
        return v


class NodePool(SettingsModel):
    """A set of identical GPU nodes. `gpusPerNode: 0` marks a CPU pool (dev only)."""

    name: str
    kind: Literal["eks", "existing"] = "existing"
    gpu_product: str | None = Field(
        None, description="GPU model, e.g. H100-80GB or the GPU Operator label NVIDIA-H100-80GB-HBM3.")
    gpus_per_node: int = Field(ge=0, le=16)
    node_count: int = Field(1, ge=1, le=1000)
    gpu_memory_gib: float | None = Field(None, gt=0, alias="gpuMemoryGiB",
                                         description="Override the GPU table's memory (what CUDA reports).")
    interconnect: Literal["nvlink", "pcie"] | None = Field(
        None, description="How the node's GPUs talk (NVLink/NVSwitch or PCIe); overrides the GPU table's default "
                          "(SXM/NVL parts NVLink, PCIe and consumer parts PCIe). Sizes non-torch memory at TP > 1.")
    unified_memory: bool = Field(
        False, description="True when the operating system can use the GPUs' memory: GH200 or GB200 nodes whose GPU "
                           "memory is onlined as a NUMA node (not CDMM mode). The fit check then takes what vLLM finds "
                           "free as depending on the host, and a model's verdict is tight at best (docs/sizing.md, "
                           "'Unified memory'); GB10 and Jetson parts are unified whatever this says.")
    mig: bool = Field(False, description="Partition the pool's GPUs with MIG: the layout planner packs the models' "
                                         "slices (gpuShare mig:<profile> / auto) into per-GPU geometries and labels "
                                         "each node (needs platform.gpuOperator.migStrategy mixed and `nodes`).")
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
    node_resources: NodeResources | None = Field(
        None, description="What one node gives pods (allocatable: cpu, memory, ephemeralStorage), used where the "
                          "Nodes cannot be read (render mode, offline previews, nodes not yet joined); the node "
                          "capacity check packs every replica's CPU and memory requests onto the pool's nodes.")

    _gib = field_validator("gpu_memory_gib", mode="before")(gib_number)

    @field_validator("name")
    @classmethod
    def _pool_name(cls, v: str) -> str:
        if not DNS1035_RE.fullmatch(v) or len(v) > 40:
            raise ValueError(f"node pool name {v!r} must be a DNS-1035 label of at most 40 characters "
                             "(lowercase letters, digits and '-', starting with a letter)")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        checks = ((ks.label_key_problem(k), ks.label_value_problem(val)) for k, val in v.items())
        problems = [f"label {p}" for pair in checks for p in pair if p]
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("nodes")
    @classmethod
    def _node_names(cls, v: list[str]) -> list[str]:
        problems = [p for n in v if (p := ks.subdomain_problem(n, "node name"))]
        twice = sorted({n for n in v if v.count(n) > 1})
        problems += [f"node {n!r} is listed {v.count(n)} times; list each node once (each node is labelled "
                     "and tainted by one patch)" for n in twice]
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("gpu_product")
    @classmethod
    def _known_gpu(cls, v: str | None) -> str | None:
        from tkf_infra.sizing.gpus import lookup_gpu

        if v is not None:
            try:
                lookup_gpu(v)
            except KeyError as exc:
                raise ValueError(str(exc.args[0])) from None
        return v

    def _gpu_settings(self) -> list[tuple[str, str]]:
        """(key, value) of each setting of this pool that only a GPU pool has."""
        named = [("gpuProduct", self.gpu_product), ("mig", "true" if self.mig else None),
                 ("gpuMemoryGiB", f"{self.gpu_memory_gib:g}" if self.gpu_memory_gib else None),
                 ("interconnect", self.interconnect)]
        return [(key, repr(value) if key == "gpuProduct" else value) for key, value in named if value is not None]

    @model_validator(mode="after")
    def _pool_rules(self) -> NodePool:
        if self.gpus_per_node > 0 and not self.gpu_product and self.kind == "existing":
            raise ValueError("gpuProduct is required when gpusPerNode > 0 (e.g. H100-80GB); it is what the "
                             "fit check sizes against")
        if self.gpus_per_node == 0 and (gpu := self._gpu_settings()):
            # Refused here, once, as the pool: else each model placed on it is told the pool is a CPU pool.
            said = " and ".join(f"{key} {value}" for key, value in gpu)
            raise ValueError(f"gpusPerNode 0 marks a CPU pool, but {said} describe{'s' * (len(gpu) == 1)} GPUs: set "
                             "gpusPerNode to the GPUs each node has (e.g. 8), or remove "
                             f"{' and '.join(key for key, _ in gpu)} for a CPU pool")
        if self.kind == "eks":
            missing = [k for k, v in (("instanceType", self.instance_type), ("clusterName", self.cluster_name),
                                      ("nodeRoleArn", self.node_role_arn)) if not v]
            missing += [] if self.subnet_ids else ["subnetIds"]
            if missing:
                raise ValueError(f"kind eks needs {', '.join(missing)}")
            problems = []
            if self.node_role_arn and not _ROLE_ARN_RE.fullmatch(self.node_role_arn):
                problems.append(f"nodeRoleArn {self.node_role_arn!r} is not an IAM role ARN (arn:aws:iam::"
                                "<12-digit account>:role/<name>)")
            problems += [f"subnetIds: {s!r} is not a subnet id (subnet-…)" for s in self.subnet_ids
                         if not _SUBNET_RE.fullmatch(s)]
            low, high = self.min_size, self.max_size
            if low is not None and high is not None and low > high:
                problems.append(f"minSize {low} is above maxSize {high}")
            if (low is not None and self.node_count < low) or (high is not None and self.node_count > high):
                problems.append(f"nodeCount {self.node_count} (the desired size) is outside minSize..maxSize "
                                f"({low if low is not None else '-'}..{high if high is not None else '-'})")
            if problems:
                raise ValueError("; ".join(problems))
        return self
