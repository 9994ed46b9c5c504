"""From validated settings and the edge's data to the fleet plan: pools, sized models, exclusions.

Its modules and what they may import: docs/architecture.md (checked by tests/test_architecture_map.py).
"""

from tkf_infra.plan.exclusion import Exclusion, Refusal, Stage, verdict
from tkf_infra.plan.fleet import FleetPlan, plan_fleet
from tkf_infra.plan.model_plan import ModelPlan
from tkf_infra.plan.one_model import LiveFindings, sizing_params
from tkf_infra.plan.pools import PoolFacts, PoolProblem, resolve_pool

__all__ = ["Exclusion", "FleetPlan", "LiveFindings", "ModelPlan", "PoolFacts", "PoolProblem", "Refusal", "Stage",
           "plan_fleet", "resolve_pool", "sizing_params", "verdict"]
