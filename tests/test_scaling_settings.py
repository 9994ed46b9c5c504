"""`scaling` in the catalog: the range, the signal, and where autoscaling is refused (docs/scaling.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_settings import only_problem, with_model
from tkf_infra.config import validate_catalog
from tkf_infra.config.scaling import DEFAULT_TARGETS, ScalingMetric


def test_scaling_defaults_and_the_reserved_count_is_the_maximum() -> None:
    cat = validate_catalog(with_model(scaling={"maxReplicas": 4}))
    (entry,) = cat.models
    assert entry.scaling is not None
    assert (entry.scaling.min_replicas, entry.scaling.max_replicas) == (1, 4)
    assert entry.scaling.metric == ScalingMetric.WAITING_REQUESTS
    assert entry.scaling.target_value == DEFAULT_TARGETS[ScalingMetric.WAITING_REQUESTS]
    assert entry.reserved_replicas == 4


def test_without_scaling_the_reserved_count_is_replicas() -> None:
    (entry,) = validate_catalog(with_model(replicas=3)).models
    assert entry.scaling is None and entry.reserved_replicas == 3


def test_min_above_max_refused_with_both_figures() -> None:
    msg = only_problem(with_model(scaling={"minReplicas": 5, "maxReplicas": 2}))
    assert "models[0] m: scaling: minReplicas 5 is above maxReplicas 2" in msg
    assert "raise maxReplicas to at least 5" in msg


def test_scale_to_zero_is_a_range_from_zero_planned_at_its_maximum() -> None:
    (entry,) = validate_catalog(with_model(scaling={"minReplicas": 0, "maxReplicas": 2})).models
    assert entry.scaling is not None and entry.scaling.min_replicas == 0
    assert entry.reserved_replicas == 2, "room is held for the maximum, not for the idle floor"


def test_a_negative_minimum_is_refused_with_the_field() -> None:
    msg = only_problem(with_model(scaling={"minReplicas": -1, "maxReplicas": 2}))
    assert "models[0] m" in msg and "minReplicas" in msg and "greater than or equal to 0" in msg


def test_multi_node_cannot_autoscale() -> None:
    msg = only_problem(with_model(nodeCount=2, gpusPerNode=8, tensorParallelSize=8, pipelineParallelSize=2,
                                  scaling={"maxReplicas": 2}))
    assert "multi-node model (nodeCount 2) cannot autoscale" in msg
    assert "set a fixed `replicas`" in msg


def test_replicas_and_scaling_are_exclusive() -> None:
    msg = only_problem(with_model(replicas=2, scaling={"maxReplicas": 3}))
    assert "replicas and scaling are exclusive" in msg and "drop `replicas`" in msg


@pytest.mark.parametrize(("scaling", "field", "said"), [
    ({"maxReplicas": 2, "metric": "gpuUtil"}, "scaling.metric", "'runningRequests' or 'kvCacheUsage'"),
    ({"maxReplicas": 2, "metric": "kvCacheUsage", "target": 80}, "scaling", "kvCacheUsage is a fraction"),
    ({"maxReplicas": 2, "target": 0}, "scaling.target", "greater than 0"),
    ({"maxReplicas": 0}, "scaling.maxReplicas", "greater than or equal to 1"),
    ({"minReplicas": 1}, "scaling.maxReplicas", "is required but missing"),
    ({"maxReplicas": 2, "cooldown": 5}, "scaling.cooldown", "cooldownSeconds"),
])
def test_each_bad_scaling_field_is_named(scaling: dict[str, Any], field: str, said: str) -> None:
    msg = only_problem(with_model(scaling=scaling))
    assert f"models[0] m: {field}" in msg and said in msg, msg


def test_every_scaling_problem_reported_at_once() -> None:
    msg = only_problem(with_model(scaling={"minReplicas": 3, "maxReplicas": 2, "metric": "kvCacheUsage",
                                           "target": 2}))
    assert "above maxReplicas" in msg and "fraction" in msg


def test_an_autoscaled_entry_as_deployed_validates_again() -> None:
    """The `deployed` output is what a refused edit falls back to: it must read back as the same entry."""
    from tkf_infra.config import ModelEntry
    from tkf_infra.outputs import deployed_entry

    (entry,) = validate_catalog(with_model(scaling={"minReplicas": 2, "maxReplicas": 5, "target": 3})).models
    published = deployed_entry(entry)
    assert "replicas" not in published and published["scaling"]["maxReplicas"] == 5
    assert ModelEntry.model_validate(published) == entry
