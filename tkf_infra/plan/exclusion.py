"""A model left out of the deployment, as data: the model, the stage that refused it, and each refusal's
catalog field and reason — and the sentences every report prints, written from that data alone.

Why data: the program's error log, the `rejected` stack output, the CLI's `--json` summary and its
table all report the same refusals. Consumers read the fields (`stage`, `refusals[].field`), never the
wording; where a report has to recognise a line the program logged (the summary drops the program's
own lines from the stack-level errors, since the per-model rows already say them), it rebuilds that
line with the functions below from the exported data and compares, so rewording a sentence here
changes both sides at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tkf_infra.config.base import label_name


class Stage(StrEnum):
    """Which check left a model out (the `stage` of a `rejected` output entry)."""

    CATALOG = "catalog"
    """The catalog rules: a field value, uniqueness, placement on a pool."""
    POOL = "pool"
    """Its node pool's settings do not hold together (EC2 facts, product labels)."""
    LIVE = "live"
    """What the GPUs report (DCGM) contradicts its pool, or a shared GPU lacks the free memory."""
    LOCK = "lock"
    """No usable facts in models.lock.json."""
    ACCESS = "access"
    """A gated repo without hfTokenSecret."""
    FIT = "fit"
    """It does not fit its GPUs (or no MIG profile / time-sliced share of them)."""
    TIGHT = "tight"
    """Its fit is tight (the estimate fits its GPUs, the conservative bound does not) and the stack is `strict`."""
    PLACEMENT = "placement"
    """Its pool's layout cannot hold it: MIG slices that do not pack, or time-sliced shares that could overrun a GPU."""
    POLICY = "policy"
    """The platform owner's policy pack refused it (reported by the CLI, which runs the pack)."""
    TOPOLOGY = "topology"
    """The configured platform cannot render it: an API it needs (LeaderWorkerSet, KServe) is not served."""
    CAPACITY = "capacity"
    """A replica's CPU, memory and GPU requests fit on no node of its pool (`tkf_infra.plan.admission`)."""
    STORAGE = "storage"
    """Its weight cache does not fit in what its storage class (quota, capacity, budget) has left."""


#: The catalog field each stage blames when the refusal names no narrower one (None: no single field,
#: e.g. the fit check weighs the whole entry against its GPUs). Catalog refusals carry their own field.
STAGE_FIELD: Mapping[Stage, str | None] = {
    Stage.CATALOG: None, Stage.POOL: "nodePool", Stage.LIVE: "nodePool", Stage.LOCK: "revision",
    Stage.ACCESS: "hfTokenSecret", Stage.FIT: None, Stage.TIGHT: None, Stage.PLACEMENT: "gpuShare", Stage.POLICY: None,
    Stage.TOPOLOGY: None, Stage.CAPACITY: None, Stage.STORAGE: None,
}


@dataclass(frozen=True)
class Refusal:
    """One reason a model was left out: the catalog field to change (None: no single field) and the
    sentence, which names the model, the value and the fix."""

    field: str | None
    reason: str

    def as_output(self) -> dict[str, Any]:
        return {"field": self.field, "reason": self.reason}


@dataclass(frozen=True)
class Exclusion:
    """A model left out of the deployment, with every refusal at once."""

    name: str
    index: int
    stage: Stage
    refusals: tuple[Refusal, ...]
    kept: bool = False
    """Deployed before and still serving at its last deployed settings (nothing of it changes)."""

    @classmethod
    def of(cls, name: str, index: int, stage: Stage, reasons: Sequence[str], field: str | None = "") -> Exclusion:
        """Refusals that all blame one field (`""`: the stage's usual one, `STAGE_FIELD`)."""
        blamed = STAGE_FIELD[stage] if field == "" else field
        return cls(name, index, stage, tuple(Refusal(blamed, r) for r in reasons))

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(r.reason for r in self.refusals)

    def as_output(self) -> dict[str, Any]:
        """One `rejected` output row (docs/outputs.md): `reasons` as in contract version 1, and
        `refusals` pairing each reason with its field."""
        return {"index": self.index, "name": self.name, "stage": self.stage.value, "reasons": list(self.reasons),
                "refusals": [r.as_output() for r in self.refusals], "kept": self.kept}

    @classmethod
    def from_output(cls, data: Mapping[str, Any]) -> Exclusion:
        """Back from a `rejected` row; a row written before `refusals` existed gets the stage's field."""
        stage = Stage(str(data.get("stage", "catalog")))
        rows = data.get("refusals")
        if isinstance(rows, list) and all(isinstance(r, Mapping) for r in rows):
            refusals = tuple(Refusal(None if r.get("field") is None else str(r["field"]), str(r.get("reason", "")))
                             for r in rows)
        else:
            refusals = tuple(Refusal(STAGE_FIELD[stage], str(r)) for r in data.get("reasons") or ())
        return cls(str(data.get("name") or ""), int(data.get("index", -1)), stage, refusals,
                   bool(data.get("kept", False)))

    @property
    def label(self) -> str:
        return label_name(self.name) if self.name else f"models[{self.index}]"

    def log_line(self) -> str:
        """How the program logs it (ops/summary.py rebuilds this line from the `rejected` output)."""
        reasons = "\n".join(f"  - {r}" for r in self.reasons)
        if self.kept:
            return (f"{self.label}: the new settings were refused ({self.stage.value}); it keeps serving at its last "
                    f"deployed settings:\n{reasons}")
        return f"{self.label} was left out of this deployment ({self.stage.value}):\n{reasons}"


def verdict(excluded: Sequence[Exclusion], errors: Sequence[str], deployed: int) -> str | None:
    """Why the run must end non-zero (None when everything went through), from the plan's data: the
    left-out models, the stack-level problems and how many models are deployed (the kept ones included).

    The program logs it (or raises it, under `up`); ops/summary.py calls this with the stack outputs
    (`rejected`, `problems`, `deployed`) to recognise that line."""
    if excluded:
        names = ", ".join(x.label + (" (kept at its last deployed settings)" if x.kept else "") for x in excluded)
        n = len(excluded)
        fresh = deployed - sum(x.kept for x in excluded)
        return (f"{n} catalog entr{'y was' if n == 1 else 'ies were'} refused ({names}); the other "
                f"{fresh} were deployed. Fix the errors above and run again.")
    if errors:
        return (f"{len(errors)} fleet problem(s), reported above; the models were deployed but the fleet "
                "needs fixing")
    return None
