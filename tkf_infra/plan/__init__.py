"""From validated settings and the edge's data to the fleet plan: pools, sized models, exclusions.

- `pools`: what each node pool is (GPU, selector, taints), from settings and EC2 facts;
- `share`: how much of a GPU each model gets (MIG profile, time-sliced budget) and the fit there;
- `layout`: where shares land (MIG geometries per node and GPU, the time-slicing proof);
- `fleet`: which models are deployed and which are left out, with the fit check's verdict;
- `exclusion`: a left-out model as data (stage, and each refusal's field and reason) and the lines reports print.
"""

from tkf_infra.plan.exclusion import Exclusion, Refusal, Stage, verdict
from tkf_infra.plan.fleet import FleetPlan, LiveFindings, ModelPlan, plan_fleet, sizing_params
from tkf_infra.plan.pools import PoolFacts, PoolProblem, resolve_pool

__all__ = ["Exclusion", "FleetPlan", "LiveFindings", "ModelPlan", "PoolFacts", "PoolProblem", "Refusal", "Stage",
           "plan_fleet", "resolve_pool", "sizing_params", "verdict"]
