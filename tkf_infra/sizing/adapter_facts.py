"""What we know about one LoRA adapter (``repo@revision``): its ``adapter_config.json``, as committed.

Why kept like a model's facts (models.lock.json, `adapters`): the plan checks each adapter against its
base — the base it was trained on, its rank, the modules it targets, the PEFT features it uses — at
`pulumi preview`, offline; a revision is a commit, so the entry never goes stale. The raw config is
kept whole and read through the properties below, the fields vLLM 0.32 reads
(vllm/lora/peft_helper.py@v0.32.0:20-51 `PEFTHelper`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class AdapterFacts(BaseModel):
    """One adapter's committed facts: ``config`` is the raw adapter_config.json."""

    model_config = ConfigDict(frozen=True)

    repo: str
    revision: str
    config: dict[str, Any] = Field(default_factory=dict)
    source: str = ""

    @property
    def key(self) -> str:
        return f"{self.repo}@{self.revision}"

    @property
    def base_model(self) -> str | None:
        value = self.config.get("base_model_name_or_path")
        return value if isinstance(value, str) and value else None

    @property
    def rank(self) -> int | None:
        """The largest rank of any module (`r`, or a larger `rank_pattern` entry), as vLLM checks it
        against max_lora_rank (peft_helper.py@v0.32.0:193-198)."""
        r = self.config.get("r")
        pattern = self.config.get("rank_pattern") or {}
        ranks = [v for v in (r, *(pattern.values() if isinstance(pattern, dict) else ())) if isinstance(v, int)]
        return max(ranks) if ranks else None

    @property
    def target_modules(self) -> list[str] | str | None:
        value = self.config.get("target_modules")
        return value if isinstance(value, (list, str)) else None

    @property
    def modules_to_save(self) -> list[str]:
        value = self.config.get("modules_to_save") or []
        return [str(v) for v in value] if isinstance(value, list) else [str(value)]
