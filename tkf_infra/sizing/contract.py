"""The fit check's contract: what it is asked (`FitInputs`) and what it answers (`FitResult`).

Why typed and in one place: the program decides from the answer which models are deployed, the
dynamic provider records it in state and gates each model on it, the stack outputs and the pods'
annotations publish its figures, and tests pin them — all by these field names. The verdict is
computed once, by `evaluate`; everything else reads the result.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.estimate_result import VERDICTS, Estimate, Verdict
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import GpuSpec
from tkf_infra.sizing.params import SizingError, SizingParams
from tkf_infra.sizing.startup import Doubt
from tkf_infra.sizing.suggest import doubt_text, fit_message, suggest

#: How far a running model's KV tokens, as its vLLM reports them, may drift from this check's prediction
#: before `status` flags it and the drift alert fires (issue 13's tolerance: the sizing bench holds the
#: estimator to a 2 % median and 10 % worst case on recorded start-ups; one live model off by more than
#: 5 % is worth a person's look).
KV_DEVIATION_LIMIT = 0.05

#: Annotation key prefix of the published figures (`tkf.io/fit-kv-cache-tokens`, …).
ANNOTATION_PREFIX = "tkf.io/fit-"


@functools.cache
def wire_name(field: str) -> str:
    """camelCase like the stack file's keys, with the unit spelled as users write it (weightsGiB).
    Cached: every model's figures are published twice (outputs, component) under the same few keys."""
    return to_camel(field).replace("Gib", "GiB")


def short_digest(text: str) -> str:
    """16 hex digits of SHA-256: names an input in state without carrying it."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _Wire(BaseModel):
    """camelCase on the wire (state, outputs)."""

    model_config = ConfigDict(alias_generator=wire_name, populate_by_name=True, frozen=True)


class FitInputs(_Wire):
    """Everything one fit verdict depends on; a change to any of it re-evaluates the model."""

    model: str
    """Catalog name of the entry."""
    repo: str
    revision: str
    facts: ModelFacts
    gpu: GpuSpec | None
    """None for the CPU profile."""
    params: SizingParams
    max_tensor_parallel: int = 8
    """The pool's GPUs per node: the ceiling for a suggested tensorParallelSize."""

    def summary(self) -> dict[str, object]:
        """What the verdict was computed from, small enough for state and a readable preview diff.

        The checkpoint's facts are recorded by digest (they are the committed lock entry)."""
        digest = short_digest(self.facts.model_dump_json())
        return {
            "repo": self.repo, "revision": self.revision, "factsSha256": digest,
            "gpu": self.gpu.name if self.gpu else "cpu",
            "gpuMemoryGiB": self.gpu.memory_gib if self.gpu else None,
            **({"interconnect": self.gpu.interconnect, "sharedGpu": self.gpu.shared} if self.gpu else {}),
            "params": self.params.model_dump(by_alias=False, exclude_none=True),
        }


class FitFigures(_Wire):
    """What a user sees per model before anything is applied: preview, outputs, pod annotations.

    `kv_cache_tokens` is the estimate of what vLLM will print; the `_bound` figures are the
    conservative floor the verdict is taken on, and `uncertainty` says what separates the two and
    which input, pinned, would close the gap."""

    fits: bool
    """Whether the model deploys: its verdict is fits or tight (`verdict`)."""
    weights_gib: float
    kv_cache_gib: float
    kv_cache_tokens: int
    max_concurrency: float
    max_fitting_model_len: int | None = None
    kv_cache_gib_bound: float = 0.0
    kv_cache_tokens_bound: int = 0
    max_concurrency_bound: float = 0.0
    verdict: Verdict = "fits"
    """fits (on the conservative bound), tight (the estimate fits, the bound does not: it deploys with a warning,
    a strict stack or the policy pack refuses it) or refuses (the estimate does not fit): `estimate_result.Verdict`."""
    vllm_profile: str = ""
    """The release row of tkf_infra/sizing/versions.py the estimate used."""
    lora_gib: float = 0.0
    """What vLLM reserves for LoRA per GPU rank (adapter slots at maxAdapters x maxRank, Punica metadata and
    workspace: tkf_infra/sizing/lora.py), already taken out of `kv_cache_gib`; 0 without adapters."""
    uncertainty: str | None = None
    warnings: tuple[str, ...] = ()

    def published(self) -> dict[str, object]:
        """The figures under their camelCase keys (stack outputs' `fit`)."""
        return {wire_name(k): _plain(getattr(self, k)) for k in FitFigures.model_fields}

    def annotations(self) -> dict[str, str]:
        """The figures as pod annotations, so `kubectl describe` shows what the check predicted."""
        return {ANNOTATION_PREFIX + re.sub(r"_", "-", k): _text(getattr(self, k)) for k in FitFigures.model_fields}


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple):
        return "; ".join(str(v) for v in value)
    return str(value)


class FitResult(FitFigures):
    """The verdict with its reasons: `message` is the refusal a user reads (numbers, bound and the way out)."""

    activation_gib: float = 0.0
    lora_host_gib: float = 0.0
    """Host memory of one GPU rank's CPU cache of LoRA adapters (`maxCpuAdapters` full adapters: each rank's
    worker loads its own, vllm/lora/worker_manager.py@v0.32.0:106-145); the pod's memory request adds it."""
    problems: tuple[str, ...] = ()
    tight: tuple[str, ...] = ()
    """Why the verdict is tight: each check only the bound fails, with the margin, the doubt and what removes it."""
    doubts: tuple[Doubt, ...] = ()
    """Each term between estimate and bound: GiB of KV memory it may cost and the input that pins it."""
    message: str | None = None


def evaluate(inputs: FitInputs, explain: bool = True) -> FitResult:
    """Size the model and judge it: the one place the verdict is computed.

    `explain=False` leaves out the way out of a no-fit (`message` stays None): for a caller that reads only
    the verdict and `problems`, as `gpuShare: auto` does of each candidate it passes over, since `suggest`
    sizes the model again at up to eight tensor-parallel sizes (most of the plan's sizing time)."""
    try:
        est = estimate(inputs.facts, inputs.gpu, inputs.params, model=inputs.model,
                       prefix_caching=inputs.params.enable_prefix_caching)
        message = None
        if est.verdict != "fits" and explain:
            sugg = None
            if inputs.gpu is not None:
                sugg = suggest(inputs.facts, inputs.gpu, inputs.params, max_tp=inputs.max_tensor_parallel,
                               current=est, prefix_caching=inputs.params.enable_prefix_caching)
            message = fit_message(est, sugg) + lora_way_out(inputs, est)
    except (SizingError, KeyError, ValueError) as exc:
        return FitResult(fits=False, verdict="refuses", weights_gib=0.0, kv_cache_gib=0.0, kv_cache_tokens=0,
                         max_concurrency=0.0, problems=(str(exc),),
                         message=f"model {inputs.model}: cannot size {inputs.repo}@{inputs.revision}: {exc}")
    return result_of(est, message)


def lora_way_out(inputs: FitInputs, est: Estimate) -> str:
    """When the base would fare better without its adapters (fit, or fit on the bound): say so, with what LoRA
    takes and how to make room."""
    lora = inputs.params.lora
    if lora is None or inputs.gpu is None:
        return ""
    without = estimate(inputs.facts, inputs.gpu, inputs.params.model_copy(update={"lora": None}), model=inputs.model,
                       prefix_caching=inputs.params.enable_prefix_caching)
    if VERDICTS.index(without.verdict) >= VERDICTS.index(est.verdict):
        return ""
    fares = "fits" if without.verdict == "fits" else "is tight"
    return (f"; it {fares} without its LoRA adapters, which reserve {est.lora_gib:.2f} GiB per GPU (lora: "
            f"{lora.max_adapters} adapter slots at maxRank {lora.max_rank}): lower lora.maxAdapters or "
            "lora.maxRank, or give the model more GPUs (tensorParallelSize)")


def result_of(est: Estimate, message: str | None = None) -> FitResult:
    """The published figures and verdict of an estimate."""
    return FitResult(
        fits=est.fits, verdict=est.verdict, weights_gib=round(est.weights_gib, 2),
        kv_cache_gib=round(est.available_kv_gib, 2),
        kv_cache_tokens=est.kv_cache_tokens, max_concurrency=round(est.max_concurrency, 2),
        max_fitting_model_len=est.max_fitting_model_len, kv_cache_gib_bound=round(est.available_kv_gib_bound, 2),
        kv_cache_tokens_bound=est.kv_cache_tokens_bound, max_concurrency_bound=round(est.max_concurrency_bound, 2),
        vllm_profile=est.vllm_profile, uncertainty=doubt_text(est), warnings=tuple(est.warnings),
        lora_gib=round(est.lora_gib, 2),
        activation_gib=round(est.activation_gib, 2), lora_host_gib=est.lora_host_gib,
        problems=tuple(est.problems), tight=tuple(est.tight), doubts=tuple(est.doubts),
        message=message,
    )


def fit_record(inputs: FitInputs, result: FitResult) -> dict[str, object]:
    """What the stack's FitCheck keeps of one model: the verdict (with the refusal it would raise) and
    a digest of what it was computed from, so a changed input still shows as that model's change.

    Nothing more, because every leaf crosses the SDK, the engine and the event stream at each preview
    (issue 18): the figures are on the workload's `tkf.io/fit-*` annotations and in the `endpoints`
    output, the entry as deployed in the `deployed` output."""
    digest = short_digest(json.dumps(inputs.summary(), sort_keys=True, default=str))
    verdict: dict[str, object] = {"fits": result.fits}
    if result.message:
        verdict["message"] = result.message
    return {"sizedFor": digest, "result": verdict}
