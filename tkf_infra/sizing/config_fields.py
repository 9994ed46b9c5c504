"""Reading config.json as user input: every field sizing uses, checked for type and range.

Why: a config is whatever the checkpoint's authors wrote (and the lock copied). Architectures put
per-layer lists where most put one number (OpenELM head counts, Gemma 3n MLP widths), nest the text
model, write ``null`` for "default", or write ``"4096"``. A field of an unexpected shape must become
a refusal of that one model naming the field, its value and what would fix it — never a TypeError in
the middle of the fit check (a crash of the whole preview, issue 29) nor a number silently misread.

`Fields` wraps one (sub-)config and knows where it sits (``text_config.``), so each message names the
field as the user finds it in the file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tkf_infra.sizing.params import SizingError

#: Far above any real checkpoint, low enough that loops over layers/ranks and the byte counts stay
#: small: a config that says 10**30 layers is refused, not iterated.
MAX_LAYERS = 10_000
MAX_DIM = 10_000_000
MAX_VOCAB = 100_000_000
MAX_POSITIONS = 1 << 32


class ConfigFieldError(SizingError):
    """A config.json field sizing needs has a type or value it cannot use (the message names it)."""


#: Marks a refusal the reader did not name (a tkf-infra bug, not the user's); the config fuzz test fails on it.
UNREAD_SHAPE = "a gap in tkf-infra's config reader"


@contextmanager
def reading_config() -> Iterator[None]:
    """The last line of defence: a config of a shape the reader let through still refuses the one model
    (a `ConfigFieldError`, which the plan turns into that model's exclusion) instead of ending the whole
    preview with a traceback (issue 29)."""
    try:
        yield
    except (TypeError, AttributeError, IndexError, ArithmeticError, RecursionError) as exc:
        raise ConfigFieldError(f"config.json has a shape the sizing cannot read ({type(exc).__name__}: {exc}); "
                               f"this is {UNREAD_SHAPE}: please report it with the config") from exc


def describe(value: Any) -> str:
    """A short rendering of a bad value for a message."""
    if isinstance(value, list):
        return f"a list of {len(value)} values"
    if isinstance(value, dict):
        return f"an object with keys {sorted(map(str, value))[:5]}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _as_number(value: Any) -> float | None:
    """An int/float (not bool); None otherwise. A numeric string ("4096") is refused too: transformers
    would keep it a string and the model would not load, so sizing it would accept what cannot start."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _finite(num: float) -> bool:
    return isinstance(num, int) or math.isfinite(num)  # an int beyond a float (10**400) is finite


class Fields:
    """Typed, range-checked reads of one config dict (`where` prefixes field names in messages)."""

    def __init__(self, cfg: dict[str, Any], where: str = "") -> None:
        self.cfg = cfg
        self.where = where

    def name(self, key: str) -> str:
        return f"{self.where}{key}"

    def fail(self, key: str, value: Any, expected: str, fix: str = "") -> ConfigFieldError:
        return ConfigFieldError(f"config.json field {self.name(key)} is {describe(value)}; expected {expected}"
                                + (f"; {fix}" if fix else "; correct the lock entry's config"))

    def present(self, *keys: str) -> str | None:
        """The first of `keys` whose value is not null."""
        return next((k for k in keys if self.cfg.get(k) is not None), None)

    def raw(self, *keys: str) -> Any:
        key = self.present(*keys)
        return None if key is None else self.cfg[key]

    def integer(self, *keys: str, lo: int = 0, hi: int = MAX_DIM, default: int | None = None,
            per_layer: int | None = None) -> int | None:
        """The first present key as an integer in [lo, hi] (integral floats and numeric strings accepted).

        `per_layer`: the layer count, when the field may be a per-layer list; a list of equal values is
        that value, a list that varies is refused (use `int_list` where variation is modelled)."""
        key = self.present(*keys)
        if key is None:
            return default
        value = self.cfg[key]
        if isinstance(value, list) and per_layer is not None:
            values = self.int_list(key, per_layer, lo=lo, hi=hi)
            if len(set(values)) > 1:
                raise ConfigFieldError(
                    f"config.json field {self.name(key)} is a list of {len(values)} per-layer values "
                    f"({min(values)}..{max(values)}); a {key} that differs between layers is not modelled for this "
                    "architecture, so the model cannot be sized: serve a checkpoint of a supported architecture")
            return values[0]
        num = _as_number(value)
        if num is None or not _finite(num) or num != int(num):
            expected = "an integer" + (" (or one value per layer)" if per_layer is not None else "")
            raise self.fail(key, value, expected)
        out = int(num)
        if not lo <= out <= hi:
            raise self.fail(key, value, f"an integer from {lo} to {hi}")
        return out

    def int_list(self, key: str, length: int | None, *, lo: int = 0, hi: int = MAX_DIM) -> list[int]:
        """A list of integers (one per layer when `length` is given)."""
        value = self.cfg.get(key)
        if not isinstance(value, list):
            raise self.fail(key, value, "a list of integers")
        if length is not None and len(value) != length:
            raise ConfigFieldError(f"config.json field {self.name(key)} lists {len(value)} per-layer values but the "
                                   f"model has {length} layers; correct the lock entry's config")
        out = []
        for i, item in enumerate(value):
            num = _as_number(item)
            if num is None or not _finite(num) or num != int(num) or not lo <= int(num) <= hi:
                raise ConfigFieldError(f"config.json field {self.name(key)}[{i}] is {describe(item)}; expected an "
                                       f"integer from {lo} to {hi}; correct the lock entry's config")
            out.append(int(num))
        return out

    def number(self, *keys: str, lo: float = 0.0, hi: float = 1e12, default: float | None = None,
              lo_open: bool = False) -> float | None:
        key = self.present(*keys)
        if key is None:
            return default
        value = self.cfg[key]
        num = _as_number(value)
        if num is None or not _finite(num) or num < lo or num > hi or (lo_open and num == lo):
            bound = f"above {lo}" if lo_open else f"from {lo}"
            raise self.fail(key, value, f"a number {bound} to {hi}")
        return float(num)

    def text(self, *keys: str, default: str | None = None) -> str | None:
        key = self.present(*keys)
        if key is None:
            return default
        value = self.cfg[key]
        if not isinstance(value, str):
            raise self.fail(key, value, "a string")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise self.fail(key, value, "true or false")

    def sub(self, key: str) -> Fields | None:
        """The sub-object at `key` (None when absent or null)."""
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(key, value, "an object")
        return Fields(value, f"{self.where}{key}.")

    def str_list(self, key: str) -> list[str] | None:
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, value, "a list of strings")
        return list(value)
