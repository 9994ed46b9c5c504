"""Each LoRA adapter of an entry against its base, from the adapter facts in models.lock.json.

Why here and before the fit check: vLLM reads an adapter's `adapter_config.json` only when it loads
it — at start-up for `--lora-modules`, after the pod was scheduled — and then refuses it
(vllm/lora/peft_helper.py@v0.32.0:53-87 `_validate_features`, 188-202 `validate_legal`;
vllm/lora/lora_model.py@v0.32.0:246-277, a target module the model does not have). Here the same
rules are applied at preview, each problem naming the adapter, the field, the value and the fix.
A bad adapter is left out of its base's `--lora-modules` (vLLM would refuse to start with it), with
every adapter's problems at once; the base deploys with its other adapters, and the run ends non-zero
naming the adapter. Only a problem of the base itself (an architecture whose slots are not sized)
leaves the model out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tkf_infra.config import ModelEntry
from tkf_infra.config.lora import MAX_LORA_RANKS, AdapterEntry
from tkf_infra.hub.lock import Lock
from tkf_infra.sizing.adapter_facts import AdapterFacts
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.lora import LORA_ARCHITECTURES, LoraArch, architecture_of

#: `modules_to_save` vLLM accepts (classification heads only: peft_helper.py@v0.32.0:56-65).
SAVABLE_MODULES = ("classifier", "score")
#: PEFT features vLLM 0.32 refuses, with the config key that turns each on (peft_helper.py@v0.32.0:66-86).
REFUSED_FEATURES = {"use_dora": "DoRA", "lora_bias": "LoRA bias", "alora_invocation_tokens": "Activated LoRA (aLoRA)",
                    "layer_replication": "layer_replication", "use_bdlora": "block-diagonal LoRA (BD-LoRA)",
                    "use_qalora": "QALoRA"}
#: PEFT inits that change the base's weights, which vLLM refuses (peft_helper.py@v0.32.0:89-100).
PLAIN_INITS = ("gaussian", "eva", "orthogonal", "mica", "lora_ga")


@dataclass(frozen=True)
class AdapterProblems:
    """Why some of an entry's adapters cannot be served.

    `base`: problems of the base's LoRA block itself (the model is left out); `adapters`: adapter name →
    its problems (that adapter is left out, the base deploys with the others); `missing`: some lacked lock
    facts (the stage a left-out base is reported at)."""

    missing: bool
    base: tuple[str, ...]
    adapters: Mapping[str, tuple[str, ...]]

    @property
    def reasons(self) -> tuple[str, ...]:
        return (*self.base, *(r for rs in self.adapters.values() for r in rs))


def _fix_lock(a: AdapterEntry) -> str:
    return f"run `python -m tkf_infra lock --adapter {a.ref}` on a machine with Hub access and commit the lock"


def _target_problems(a: AdapterEntry, facts: AdapterFacts, arch_name: str, la: LoraArch) -> list[str]:
    targets = facts.target_modules
    if isinstance(targets, str):
        return [f"its target_modules is the pattern {targets!r}, which cannot be checked against the base offline; "
                "save the adapter with target_modules as a list of module names"]
    if not targets:
        return ["its adapter_config.json lists no target_modules; it adapts nothing vLLM can serve"]
    out = []
    for name in targets:
        short = str(name).rsplit(".", 1)[-1]
        if short in la.target_modules:
            continue
        if short in ("embed_tokens", "lm_head"):
            why = (f"vLLM 0.32 serves no LoRA on {short} of {arch_name} (its embedding_modules is empty: "
                   f"vllm/model_executor/models/{la.source})")
        elif short in ("qkv_proj", "gate_up_proj"):
            why = f"{short} is vLLM's packed layer; vLLM expects the adapter's own parts (q_proj, k_proj, v_proj / "
            why += "gate_proj, up_proj)"
        else:
            why = f"{arch_name} has no LoRA-capable module {short!r}"
        out.append(f"target module {name!r}: {why}; vLLM 0.32 takes {', '.join(la.target_modules)} on this base")
    return out


def _feature_problems(facts: AdapterFacts) -> list[str]:
    cfg = facts.config
    out = [f"it uses {what} ({key}), which vLLM 0.32 does not serve" for key, what in REFUSED_FEATURES.items()
           if cfg.get(key)]
    if cfg.get("bias") not in (None, "none"):
        out.append(f"bias {cfg.get('bias')!r}: vLLM 0.32 serves adapters with bias 'none' only")
    init = cfg.get("init_lora_weights")
    if isinstance(init, str) and init.lower() not in PLAIN_INITS:
        out.append(f"init_lora_weights {init!r} changes the base weights when PEFT loads it, which vLLM 0.32 refuses; "
                   "convert it to a plain LoRA adapter")
    extra = [m for m in facts.modules_to_save if m not in SAVABLE_MODULES]
    if extra:
        out.append(f"modules_to_save {extra}: vLLM 0.32 serves full modules only for classification heads "
                   f"({', '.join(SAVABLE_MODULES)}), so these trained weights would be refused; retrain without them")
    return out


def adapter_problems(entry: ModelEntry, base: ModelFacts, lock: Lock) -> AdapterProblems | None:
    """Every problem of every adapter of `entry` on its base, each naming the adapter; None when all are fine."""
    if entry.lora is None:
        return None
    arch_name = architecture_of(base)
    la = LORA_ARCHITECTURES.get(arch_name)
    base_reasons: list[str] = []
    per_adapter: dict[str, tuple[str, ...]] = {}
    missing = False
    if la is None:
        base_reasons.append(f"lora: LoRA on {arch_name or 'this base'} is not sized by the fit check (it sizes "
                       f"{', '.join(sorted(LORA_ARCHITECTURES))}); remove `lora` or serve the adapters on one of those")
    for a in entry.lora.adapters:
        facts = lock.get_adapter(a.repo, a.revision)
        where = f"lora.adapters {a.name} ({a.ref})"
        if facts is None:
            missing = True
            per_adapter[a.name] = (f"{where}: not in models.lock.json, so it cannot be checked against the base; "
                                   f"{_fix_lock(a)}",)
            continue
        problems: list[str] = []
        if facts.base_model != entry.repo:
            problems.append(f"it was trained on {facts.base_model or 'an unnamed base'} (adapter_config.json "
                            f"base_model_name_or_path), not on {entry.repo}; serve it on its own base or pick an "
                            f"adapter trained on {entry.repo}")
        rank = facts.rank
        if rank is None:
            problems.append("its adapter_config.json has no rank `r`")
        elif rank > entry.lora.max_rank:
            up = next((r for r in MAX_LORA_RANKS if r >= rank), None)
            fix = f"raise lora.maxRank to {up}" if up else "use an adapter of rank 512 or less"
            problems.append(f"rank {rank} is above lora.maxRank {entry.lora.max_rank} (vLLM refuses it when it loads "
                            f"the adapter); {fix} (the fit check then sizes the larger slots)")
        if la is not None:
            problems += _target_problems(a, facts, arch_name, la)
        problems += _feature_problems(facts)
        if problems:
            per_adapter[a.name] = tuple(f"{where}: {p}" for p in problems)
    if not base_reasons and not per_adapter:
        return None
    return AdapterProblems(missing, tuple(base_reasons), per_adapter)

