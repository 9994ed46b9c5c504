"""Derived Kubernetes names stay within the API server's limits for the longest allowed model name."""

from __future__ import annotations

import pytest

from tkf_infra import names
from tkf_infra.config import validate_catalog

LONGEST = "m" * names.MAX_MODEL_NAME_LEN


def test_every_suffix_fits_for_the_longest_name() -> None:
    for suffix in names.MODEL_SUFFIXES:
        assert len(LONGEST + suffix) <= names.K8S_NAME_LIMIT, suffix
    # KServe's multi-node LeaderWorkerSet `<name>-kserve-mn`, a worker StatefulSet `-<group>` and the
    # pods' controller-revision-hash label `<statefulset>-<10 chars>`: the binding constraint.
    assert len(f"{LONGEST}-kserve-mn-99-0123456789") <= names.K8S_NAME_LIMIT
    assert names.alias_service(LONGEST).endswith("-openai")
    assert names.network_policy(LONGEST) and names.service_account(LONGEST)


def test_one_name_longer_is_refused_by_the_catalog() -> None:
    doc = {"modelDefaults": {"maxModelLen": 2048, "gpusPerNode": 0}, "serving": {"allowCpu": True},
           "models": [{"name": LONGEST + "x", "repo": "Qwen/Qwen2.5-0.5B-Instruct",
                       "revision": "7ae557604adf67be50417f59c2c2f167def9a775", "servedName": "s"}]}
    assert "at most 36" in str(validate_catalog(doc).rejected[0].problems[0])


@pytest.mark.parametrize("repo", ["Qwen/Qwen2.5-0.5B-Instruct", "org/" + "x" * 96, "meta-llama/Llama_3.1.x"])
def test_weight_cache_names_are_dns_labels_within_63(repo: str) -> None:
    rev = "7ae557604adf67be50417f59c2c2f167def9a775"
    pvc, job = names.weight_cache(repo, rev), names.weight_download_job(repo, rev)
    assert len(job) <= 63 and job == f"{pvc}-download"
    assert pvc.replace("-", "").isalnum() and pvc == pvc.lower()
    assert names.weight_cache(repo, rev) != names.weight_cache(repo, "0" * 40)
