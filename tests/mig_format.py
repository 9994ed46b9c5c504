"""The mig-parted v1 config format, as the GPU Operator's mig-manager reads it, checked by its documented rules.

Why a checker of our own: the format is small and documented (NVIDIA mig-parted README, "Config file
format"; the GPU Operator v26.7.0 chart ships its default config, copied to tests/data/mig), but the
project cannot build NVIDIA's parser here. The rules below are the documented ones; NVIDIA's own default
config must pass them (the control that they accept real configs) and broken configs must fail (the
control that they can refuse).

- `version: v1` and a non-empty `mig-configs` map;
- each named config is a non-empty list of device specs with only the keys `devices` (`all` or a list
  of GPU indexes), `device-filter` (PCI device ids), `mig-enabled` (bool) and `mig-devices` (profile →
  count);
- `mig-devices` only when `mig-enabled` is true; profile names `<g>g.<mem>gb` with an optional
  `c.` compute prefix and `+me`/`+gfx`/`-me` attribute suffixes; counts non-negative integers;
- a GPU index is configured at most once per config.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

PROFILE_RE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb((\+me|\+gfx|-me)(\.all)?)*$")
SPEC_KEYS = {"devices", "device-filter", "mig-enabled", "mig-devices"}


class MigFormatError(ValueError):
    """A config mig-manager would refuse, with the config and device spec named."""


def _spec(name: str, i: int, spec: Any, seen: set[int]) -> dict[str, Any]:
    where = f"mig-configs.{name}[{i}]"
    if not isinstance(spec, dict):
        raise MigFormatError(f"{where}: a device spec must be a mapping, got {spec!r}")
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise MigFormatError(f"{where}: unknown key(s) {sorted(unknown)}")
    devices = spec.get("devices")
    if devices != "all" and not (isinstance(devices, list) and devices
                                 and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices)):
        raise MigFormatError(f"{where}: devices must be 'all' or a list of GPU indexes, got {devices!r}")
    if isinstance(devices, list):
        twice = seen & set(devices)
        if twice:
            raise MigFormatError(f"{where}: GPU(s) {sorted(twice)} configured twice")
        seen.update(devices)
    enabled = spec.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise MigFormatError(f"{where}: mig-enabled must be true or false, got {enabled!r}")
    mig_devices = spec.get("mig-devices")
    if not enabled and mig_devices:
        raise MigFormatError(f"{where}: mig-devices given while mig-enabled is false")
    mig_devices = mig_devices or {}
    if not isinstance(mig_devices, dict):
        raise MigFormatError(f"{where}: mig-devices must map profiles to counts, got {mig_devices!r}")
    for profile, count in mig_devices.items():
        if not isinstance(profile, str) or not PROFILE_RE.match(profile):
            raise MigFormatError(f"{where}: {profile!r} is not a MIG profile name (like 1g.10gb or 1g.10gb+me)")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise MigFormatError(f"{where}: the count of {profile} must be a non-negative integer, got {count!r}")
    return {"devices": devices, "migEnabled": enabled, "migDevices": dict(mig_devices)}


def check(text: str, *names: str) -> dict[str, Any]:
    """{"valid", "error", "configs": name → [device specs]} for a config file's text; `names` must exist."""
    try:
        doc = yaml.safe_load(text)
        if not isinstance(doc, dict) or doc.get("version") != "v1":
            raise MigFormatError("version must be v1")
        configs = doc.get("mig-configs")
        if not isinstance(configs, dict) or not configs:
            raise MigFormatError("mig-configs must be a non-empty mapping")
        parsed: dict[str, list[dict[str, Any]]] = {}
        for name, specs in configs.items():
            if not isinstance(specs, list) or not specs:
                raise MigFormatError(f"mig-configs.{name}: a config must be a non-empty list of device specs")
            seen: set[int] = set()
            parsed[str(name)] = [_spec(str(name), i, s, seen) for i, s in enumerate(specs)]
        missing = [n for n in names if n not in parsed]
        if missing:
            raise MigFormatError(f"no config named {missing}")
    except (MigFormatError, yaml.YAMLError) as exc:
        return {"valid": False, "error": str(exc), "configs": {}}
    return {"valid": True, "error": None, "configs": parsed}
