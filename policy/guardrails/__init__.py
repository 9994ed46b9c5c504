"""The platform owner's guardrails, as pure checks on the Kubernetes objects tkf-infra registers.

``policy/pack.py`` serves them to the Pulumi engine (pulumi-policy); tests call the checks directly.
The order is the order ``pulumi preview`` lists them in.
"""

from __future__ import annotations

from .base import Guardrail, Violation
from .capacity import FLEET_BUDGET, GPU_REQUESTS_EQUAL_LIMITS, WEIGHT_CACHE_PROTECTED
from .exposure import API_KEY_BY_SECRET, MODEL_PODS_ISOLATED, NO_EXTERNAL_SERVICES
from .fit import FIT_VERDICT
from .placement import MODEL_GPUS, NODE_POOLS
from .provenance import APPROVED_IMAGES, REVISIONS_PINNED

GUARDRAILS: tuple[Guardrail, ...] = (
    NODE_POOLS,
    MODEL_GPUS,
    GPU_REQUESTS_EQUAL_LIMITS,
    APPROVED_IMAGES,
    REVISIONS_PINNED,
    NO_EXTERNAL_SERVICES,
    API_KEY_BY_SECRET,
    WEIGHT_CACHE_PROTECTED,
    MODEL_PODS_ISOLATED,
    FLEET_BUDGET,
    FIT_VERDICT,
)

BY_NAME = {g.name: g for g in GUARDRAILS}

__all__ = ["BY_NAME", "GUARDRAILS", "Guardrail", "Violation"]
