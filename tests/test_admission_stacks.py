"""The committed stacks against their own admission figures: they preview clean, and the figures bite.

Pulumi.dev.yaml and Pulumi.prod.yaml set each pool's `nodeResources` and a `weightCacheBudgetGiB`
(docs/admission.md, "Stack files"): with them every row of the admission table is checked offline,
and a storage warning says the budget was used, never that storage went unchecked.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.policy_helpers import stack_settings
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.plan import plan_fleet
from tkf_infra.plan.admission import W_STORAGE_NOT_LIVE, W_STORAGE_UNCHECKED
from tkf_infra.program import footprints

LOCK = load_lock()


def plan(doc: dict[str, Any]) -> Any:
    catalog = validate_catalog(doc)
    return plan_fleet(catalog, lock=LOCK, footprints=footprints(catalog))


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_committed_stack_is_admitted_whole_within_its_budget(stack: str) -> None:
    doc = stack_settings(stack)
    p = plan(doc)
    assert not p.excluded, [x.reasons for x in p.excluded]
    text = " ".join(p.warnings)
    assert f"[{W_STORAGE_NOT_LIVE}]" in text and f"[{W_STORAGE_UNCHECKED}]" not in text
    caches = {fp["weightCache"]: fp["weightCacheGiB"] for fp in p.footprints.values()}
    assert sum(caches.values()) <= doc["serving"]["weightCacheBudgetGiB"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_budget_one_gib_short_refuses_the_last_admitted_cache_by_name(stack: str) -> None:
    doc = stack_settings(stack)
    p = plan(doc)
    needed = sum({fp["weightCache"]: fp["weightCacheGiB"] for fp in p.footprints.values()}.values())
    last = doc["models"][-1]["name"]  # no priorities and no previous run: catalog order
    short = plan({**doc, "serving": {**doc["serving"], "weightCacheBudgetGiB": needed - 1}})
    refused = {x.name: (x.stage.value, " ".join(x.reasons)) for x in short.excluded}
    assert list(refused) == [last] and refused[last][0] == "storage"
    assert f"serving.weightCacheBudgetGiB ({needed - 1} GiB)" in refused[last][1]
    # A priority moves the refusal: the last entry is admitted first, the one before it now overflows.
    models = [{**m, "priority": 1} if m["name"] == last else m for m in doc["models"]]
    ranked = plan({**doc, "models": models, "serving": {**doc["serving"], "weightCacheBudgetGiB": needed - 1}})
    assert [x.name for x in ranked.excluded] == [doc["models"][-2]["name"]] and last in ranked.deployed
