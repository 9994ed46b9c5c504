"""Sizing: will a model fit on a GPU under vLLM, and with which settings.

``engine`` holds the pure accounting, ``facts`` the per-checkpoint inputs, ``gpus`` the GPU table,
``ec2`` the instance-type lookup. Nothing here imports Pulumi.
"""

from tkf_infra.sizing.engine import Estimate, ServingParams, SizingError, Suggestion, estimate, suggest
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import GpuSpec, lookup_gpu

__all__ = [
    "Estimate",
    "GpuSpec",
    "ModelFacts",
    "ServingParams",
    "SizingError",
    "Suggestion",
    "estimate",
    "lookup_gpu",
    "suggest",
]
