"""A base model's LoRA adapters in the catalog: `lora: {maxAdapters, maxRank, maxCpuAdapters, adapters}`.

Why a block of its own on the entry: vLLM serves every adapter of a base from the base's GPUs, but
reserves memory for them at start-up by `maxAdapters` and `maxRank` alone (tkf_infra/sizing/lora.py
cites where), so those two are what the fit check sizes, while the adapters themselves are pinned,
named and priced like models. This module holds the shape and the rules one entry can check; the
rules that need more are elsewhere, each in one place:

- served names unique across every model and adapter of the stack: `validate._cross_entry_rules`;
- each adapter against its base's architecture, from its `adapter_config.json` in models.lock.json
  (rank, target modules, base, features vLLM refuses): `tkf_infra/plan/lora.py`.

The vLLM flags it becomes (`--enable-lora --max-loras --max-lora-rank --max-cpu-loras --lora-modules`)
are one row of the serving-flag table (`ServingSpec.lora`, rendered by `lora_argv`), so `extraArgs`
cannot set any of them.

Why our own flags on the kserve backend too, and never `spec.model.lora` (read at KServe v0.20.0,
pkg/controller/v1alpha2/llmisvc/workload_lora.go): KServe fetches `hf://` adapters with its storage
initializer into `/mnt/lora` on every pod start (lines 41, 95-100, 125-135; workload_storage.go:127),
outside our weight cache, so they would be downloaded again by each pod and not be covered by the
download Job's failure reporting; it registers each adapter under a second name,
`publishers/<namespace>/models/<name>` (line 167), which the served-name rule and the gateway would not
know of; and it passes `--max-loras` / `--max-lora-rank` only when set (lines 244-258). It steps aside
when the container's args already carry `--lora-modules` (lines 195-199), which ours do, so one
rendering serves both backends with exactly the flags the fit check sized.
"""

from __future__ import annotations

import re

from pydantic import Field, ValidationInfo, field_validator, model_validator

from tkf_infra.config.base import SettingsModel
from tkf_infra.config.identity import HF_REPO_RE, Cost, revision_problem, served_name_problem
from tkf_infra.names import MODEL_MOUNT, adapter_dir

#: Validation context key: the entry's adapters were all left out for their own problems (`validate`), so an
#: empty `adapters` list is what is left of a block the user filled, not a block written empty.
ADAPTERS_LEFT_OUT = "adapters_left_out"

#: vLLM 0.32's `max_lora_rank` choices (vllm/config/lora.py@v0.32.0:26 `MaxLoRARanks`); it refuses any other.
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: Unanchored, `fullmatch` only: an adapter's name, as status and messages show it.
ADAPTER_NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")


class AdapterEntry(SettingsModel):
    """One LoRA adapter of a base model: pinned like a model, served under its own name."""

    name: str = Field(description="Lowercase name of the adapter within its base (DNS-1035, at most 40).")
    repo: str = Field(description="Hugging Face repo id of the adapter (holds adapter_config.json).")
    revision: str = Field(description="The 40-hex commit SHA of the adapter. Branches and tags are refused.")
    served_name: str = Field(description="Model name clients send to reach this adapter; unique across the stack.")
    cost: Cost | None = Field(None, description="Price per token at the gateway; the base's when unset.")

    @model_validator(mode="after")
    def _rules(self) -> AdapterEntry:
        """Every rule at once, each naming the adapter, so a person fixing one sees the others."""
        problems = []
        if not ADAPTER_NAME_RE.fullmatch(self.name):
            problems.append(f"name {self.name!r} is not a DNS-1035 label of at most 40 characters: use lowercase "
                            "letters, digits and '-', starting with a letter")
        if not HF_REPO_RE.fullmatch(self.repo):
            problems.append(f"repo {self.repo!r} is not a Hugging Face repo id; write it as 'org/name'")
        problems += [p for p in (revision_problem(self.revision), served_name_problem(self.served_name)) if p]
        if problems:
            raise ValueError(f"adapter {self.name!r}: " + "; ".join(problems))
        return self

    @property
    def ref(self) -> str:
        return f"{self.repo}@{self.revision}"

    @property
    def pod_path(self) -> str:
        """Where the serving pod finds it (the download Job writes it there: components/weight_cache.py)."""
        return f"{MODEL_MOUNT}/{adapter_dir(self.repo, self.revision)}"


class LoraSpec(SettingsModel):
    """What vLLM reserves for adapters (`maxAdapters` x `maxRank`, sized) and the adapters it serves."""

    max_adapters: int = Field(ge=1, le=256, description="Adapters one batch can use at once (vLLM --max-loras): "
                                                        "a GPU slot of every LoRA-capable layer each; sized.")
    max_rank: int = Field(description="Largest adapter rank served (vLLM --max-lora-rank, one of "
                                      f"{', '.join(map(str, MAX_LORA_RANKS))}); sized.")
    max_cpu_adapters: int | None = Field(None, ge=1, description="Adapters kept loaded in host memory (vLLM "
                                                                 "--max-cpu-loras, >= maxAdapters; default "
                                                                 "maxAdapters); sized against the pod's memory.")
    adapters: list[AdapterEntry] = Field(description="The adapters, each pinned and served by name.",
                                         json_schema_extra={"minItems": 1})

    @field_validator("adapters")
    @classmethod
    def _some(cls, v: list[AdapterEntry], info: ValidationInfo) -> list[AdapterEntry]:
        """At least one adapter as written; none left when each was left out for its own problems is the base
        deploying without them (docs/sizing.md: a bad adapter never takes its base down)."""
        if not v and not (info.context or {}).get(ADAPTERS_LEFT_OUT):
            raise ValueError("lists no adapter; give at least one, or remove `lora`")
        return v

    @model_validator(mode="after")
    def _rules(self) -> LoraSpec:
        problems = []
        if self.max_rank not in MAX_LORA_RANKS:
            fits = [r for r in MAX_LORA_RANKS if r >= self.max_rank]
            hint = f"; the next one up is {fits[0]}" if fits else ""
            problems.append(f"maxRank {self.max_rank} is not a rank vLLM 0.32 accepts (--max-lora-rank is one of "
                            f"{', '.join(map(str, MAX_LORA_RANKS))}){hint}")
        if self.max_cpu_adapters is not None and self.max_cpu_adapters < self.max_adapters:
            problems.append(f"maxCpuAdapters {self.max_cpu_adapters} is below maxAdapters {self.max_adapters}: vLLM "
                            "refuses it (max_cpu_loras must be >= max_loras); raise it or drop it")
        seen: dict[str, str] = {}
        for a in self.adapters:
            for kind, value in (("name", a.name), ("servedName", a.served_name)):
                key = f"{kind}:{value}"
                if key in seen:
                    problems.append(f"adapter {a.name!r}: {kind} {value!r} is already used by adapter {seen[key]!r}; "
                                    f"each adapter's {kind} must be unique")
                else:
                    seen[key] = a.name
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def cpu_adapters(self) -> int:
        """vLLM's `max_cpu_loras` as it resolves it (vllm/config/lora.py@v0.32.0:120-121: default max_loras)."""
        return self.max_cpu_adapters if self.max_cpu_adapters is not None else self.max_adapters


def lora_argv(spec: LoraSpec) -> tuple[str, ...]:
    """The argv words of the `lora` row: every LoRA flag vLLM needs, adapters by their cached path.

    `--lora-modules name=path` (vllm/entrypoints/launchers/cli_args.py@v0.32.0:55-57, `nargs='+'`): a local
    path, because vLLM would resolve a repo id at the Hub's head, not at the pinned commit. No
    `--lora-modules` when every adapter was left out (tkf_infra.plan.lora): `nargs='+'` refuses it empty."""
    words = ["--enable-lora", "--max-loras", str(spec.max_adapters), "--max-lora-rank", str(spec.max_rank),
             "--max-cpu-loras", str(spec.cpu_adapters)]
    modules = [f"{a.served_name}={a.pod_path}" for a in spec.adapters]
    return (*words, *(["--lora-modules", *modules] if modules else []))
