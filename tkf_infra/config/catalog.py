"""One catalog entry: the model's identity, placement and price on top of its vLLM flags.

The vLLM-facing fields (and their flags) are inherited from `ServingSpec`, the serving-flag table;
this module adds what is not a flag: which repo and commit, which pool, how many replicas, which
API mode, what a token costs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from functools import partial

from pydantic import Field, field_validator, model_validator

from tkf_infra.config import kube_syntax as ks
from tkf_infra.config.base import problem_check
from tkf_infra.config.extra_args import extra_args_dests, extra_args_problems
from tkf_infra.config.flags import Mode, ServingSpec
from tkf_infra.config.identity import HF_REPO_RE, revision_problem, served_name_problem
from tkf_infra.config.identity import Cost as Cost  # re-exported: tkf_infra.config.Cost
from tkf_infra.config.scaling import Scaling, entry_scaling_problem
from tkf_infra.names import MAX_MODEL_NAME_LEN

DNS1035_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
GPU_SHARE_RE = re.compile(r"(?:whole|auto|mig:(\d+g\.\d+gb)|slice:([1-9]\d*))")


class Topology(StrEnum):
    SINGLE_GPU = "single-gpu"
    TENSOR_PARALLEL = "tensor-parallel"
    MULTI_NODE = "multi-node"
    CPU = "cpu"


class Backend(StrEnum):
    KSERVE = "kserve"
    VLLM = "vllm"


def parallelism_problem(nodes: int, gpus: int, tp: int, pp: int, dp: int = 1) -> str | None:
    """The GPU arithmetic every profile obeys; the one place it is written down."""
    if gpus == 0:
        if nodes != 1 or tp != 1 or pp != 1 or dp != 1:
            return ("the CPU profile (gpusPerNode 0) runs on one node without parallelism; "
                    "set nodeCount, tensorParallelSize, pipelineParallelSize and dataParallelSize to 1")
        return None
    if tp * pp * dp != nodes * gpus:
        names, factors = "tensorParallelSize × pipelineParallelSize", f"{tp} × {pp}"
        if dp > 1:
            names, factors = f"{names} × dataParallelSize", f"{factors} × {dp}"
        return (f"{names} = {factors} = {tp * pp * dp}, but nodeCount × gpusPerNode "
                f"= {nodes} × {gpus} = {nodes * gpus}; they must be equal")
    if nodes > 1 and pp != nodes:
        return (f"multi-node serving uses pipeline parallelism across nodes: pipelineParallelSize ({pp}) must "
                f"equal nodeCount ({nodes}) and tensorParallelSize must equal gpusPerNode ({gpus})")
    return None


def step_budget_problems(mnbt: int | None, seqs: int, mml: int, extra_args: list[str]) -> list[str]:
    """Values each valid alone that vLLM 0.32 refuses together at start-up, after the pod was scheduled.

    vllm/config/scheduler.py@v0.32.0:314-333 (`SchedulerConfig.verify_max_model_len`): the step budget
    must hold the whole batch, and — with chunked prefill off — the longest prompt. The one place it is
    written down (the entry's validator, and validate.py on an entry whose other fields failed)."""
    if mnbt is None:
        return []
    problems = []
    if mnbt < seqs:
        problems.append(f"maxNumBatchedTokens {mnbt} is below maxNumSeqs {seqs}: vLLM refuses a step budget "
                        "smaller than the batch (max_num_batched_tokens must be >= max_num_seqs); raise "
                        f"maxNumBatchedTokens to at least {seqs} or lower maxNumSeqs to at most {mnbt}")
    chunked = extra_args_dests(extra_args).get("enable_chunked_prefill")
    if chunked is not None and chunked.startswith("--no-") and mnbt < mml:
        problems.append(f"maxNumBatchedTokens {mnbt} is below maxModelLen {mml} while extraArgs turn chunked "
                        f"prefill off ({chunked}): vLLM then refuses to start (a prompt must fit one step); "
                        f"raise maxNumBatchedTokens to at least {mml}, lower maxModelLen to {mnbt}, or drop "
                        f"{chunked} from extraArgs")
    return problems


class ModelEntry(ServingSpec):
    """One served model. Defaults from `modelDefaults` are merged under it before validation."""

    name: str = Field(description="DNS-1035 name; prefixes every Kubernetes object of the model.")
    repo: str = Field(description="Hugging Face repo id, e.g. Qwen/Qwen2.5-7B-Instruct.")
    revision: str = Field(description="The 40-hex commit SHA to serve. Branches and tags are refused.")
    node_pool: str | None = Field(None, description="Node pool to run on (not needed for the CPU profile).")
    topology: Topology | None = Field(None, description="Derived from the GPU counts when omitted.")
    node_count: int = Field(1, ge=1, le=64)
    gpus_per_node: int = Field(1, ge=0, le=16, description="0 = CPU profile (dev only).")
    replicas: int = Field(1, ge=0, le=100)
    extra_args: list[str] = Field(default_factory=list, description="Extra vLLM flags (none the platform owns).")
    hf_token_secret: str | None = Field(None, description="Secret (key HF_TOKEN) for gated repos.")
    priority: int | None = Field(None, ge=-1000, le=1000, description=(
        "Who keeps the room when node capacity, MIG slices or storage run short: higher is admitted first, "
        "so the lowest is refused first (unset = 0; ties in catalog order; models already deployed first). "
        "docs/admission.md"))
    gpu_share: str = Field(
        "whole", description="How much of a GPU each replica gets: `whole` (default: gpusPerNode whole GPUs), "
                             "`mig:<profile>` (one MIG slice, e.g. mig:1g.20gb, on a pool with `mig: true`), "
                             "`slice:<k>` (k of the N time-slicing replicas of one GPU: a memory budget of k/N, "
                             "proven to fit with any co-tenants) or `auto` (the smallest MIG profile / slice the "
                             "model fits at its maxModelLen and maxNumSeqs; whole GPUs on other pools).")
    cost: Cost = Field(default_factory=lambda: Cost())
    scaling: Scaling | None = Field(None, description="Autoscaling from minReplicas to maxReplicas on a vLLM signal, "
                                                      "instead of a fixed `replicas` (docs/scaling.md).")

    @field_validator("name")
    @classmethod
    def _dns_name(cls, v: str) -> str:
        if not DNS1035_RE.fullmatch(v):
            raise ValueError(f"name {v!r} is not a DNS-1035 label: use lowercase letters, digits and '-', "
                             "starting with a letter and ending with a letter or digit")
        if len(v) > MAX_MODEL_NAME_LEN:
            raise ValueError(f"name {v!r} is {len(v)} characters; at most {MAX_MODEL_NAME_LEN} keep every generated "
                             "Kubernetes name within 63 characters. Shorten it")
        return v

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, v: str) -> str:
        if not HF_REPO_RE.fullmatch(v):
            raise ValueError(f"repo {v!r} is not a Hugging Face repo id; write it as 'org/name'")
        return v

    _pinned_revision = problem_check("revision", check=revision_problem)
    _served = problem_check("served_name", check=served_name_problem)
    _secret_name = problem_check("hf_token_secret", check=partial(ks.subdomain_problem, what="Secret name"),
                                 prefix="hfTokenSecret ")

    @field_validator("gpu_share")
    @classmethod
    def _share(cls, v: str) -> str:
        if not GPU_SHARE_RE.fullmatch(v):
            raise ValueError(f"gpuShare {v!r} is not one of whole, auto, mig:<profile> (e.g. mig:1g.20gb) or "
                             "slice:<k> (k of the pool's time-slicing replicas, e.g. slice:2)")
        return v

    @field_validator("extra_args")
    @classmethod
    def _no_owned_flags(cls, v: list[str]) -> list[str]:
        problems = extra_args_problems(v)
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @model_validator(mode="after")
    def _parallelism(self) -> ModelEntry:
        problem = parallelism_problem(self.node_count, self.gpus_per_node, self.tensor_parallel_size,
                                      self.pipeline_parallel_size, self.data_parallel_size)
        if problem:
            raise ValueError(problem)
        derived = self.derived_topology
        if self.topology is not None and self.topology != derived:
            raise ValueError(f"topology {self.topology.value!r} does not match the GPU counts, which describe "
                             f"{derived.value!r}; fix the counts or drop `topology` to derive it")
        if self.gpu_share not in ("whole", "auto") and (self.gpus_per_node != 1 or self.node_count != 1):
            raise ValueError(f"gpuShare {self.gpu_share} gives each replica a part of one GPU, but the entry asks for "
                             f"{self.node_count} node(s) x {self.gpus_per_node} GPU(s); set gpusPerNode 1 and "
                             "nodeCount 1 (tensor/pipeline parallelism 1) or use gpuShare whole")
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError("enableAutoToolChoice needs toolCallParser (e.g. hermes, llama3_json)")
        tools = [k for k, on in (("enableAutoToolChoice", self.enable_auto_tool_choice),
                                 ("toolCallParser", self.tool_call_parser)) if on]
        if tools and self.mode is not Mode.CHAT:
            # vLLM 0.32 builds its chat server, the only reader of these flags, for generative runners alone
            # (vllm/entrypoints/generate/api_router.py@v0.32.0:124-150): a pooling model ignores them.
            raise ValueError(f"{' and '.join(tools)} set tool calling up for chat completions, which a mode "
                             f"{self.mode.value} model does not serve (vLLM runs it as a pooling model and ignores "
                             "them); remove them, or set mode: chat")
        return self

    @model_validator(mode="after")
    def _step_budget(self) -> ModelEntry:
        problems = step_budget_problems(self.max_num_batched_tokens, self.max_num_seqs, self.max_model_len,
                                        self.extra_args)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _scaling(self) -> ModelEntry:
        if problem := entry_scaling_problem(self.scaling, self.node_count, "replicas" in self.model_fields_set):
            raise ValueError(problem)
        return self

    @property
    def reserved_replicas(self) -> int:
        """Replicas the fleet plan holds room for: the autoscaler's maximum, else the fixed count."""
        return self.scaling.max_replicas if self.scaling else self.replicas

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
    def is_multi_node(self) -> bool:
        return self.node_count > 1

    @property
    def gpus_per_pod(self) -> int:
        """GPUs each pod requests: one pod per node, so TP × PP / nodes (0 for the CPU profile)."""
        gpus = self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size
        return 0 if self.is_cpu else gpus // self.node_count

    @property
    def gpus(self) -> int:
        """GPUs one replica takes."""
        return self.node_count * self.gpus_per_node

    @property
    def share_request(self) -> tuple[str, str | int | None]:
        """`gpuShare` parsed: ("whole", None), ("auto", None), ("mig", profile) or ("slice", k)."""
        match = GPU_SHARE_RE.fullmatch(self.gpu_share)
        if match and match.group(1):
            return "mig", match.group(1)
        if match and match.group(2):
            return "slice", int(match.group(2))
        return self.gpu_share, None

    @property
    def model_ref(self) -> str:
        return f"{self.repo}@{self.revision}"

    def without_adapters(self, names: Iterable[str]) -> ModelEntry:
        """This entry with these LoRA adapters left out (a bad one must not take its base down); the limits
        it is sized with (`maxAdapters`, `maxRank`) stay, so fixing the adapter later changes one flag."""
        if self.lora is None:
            return self
        drop = set(names)
        kept = [a for a in self.lora.adapters if a.name not in drop]
        return self.model_copy(update={"lora": self.lora.model_copy(update={"adapters": kept})})
