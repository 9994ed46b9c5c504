"""Bad stack settings meet the catalog's standard: every stack-level problem at load, all at once, each
naming its key path, the value and the fix; a pool-level problem refuses only that pool's models.

Each setting below previewed fine before and failed at apply (the API server refuses the name), or
was ignored, or stopped the run once per model without naming the setting (issue 19's audit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.engine_fixtures import EngineStack
from tests.faults.harness import run_cli
from tests.mocks import CPU, SINGLE_GPU, program, stack_doc
from tkf_infra.config import SettingsError, validate_catalog
from tkf_infra.exit_codes import ExitCode


def problems_of(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(SettingsError) as err:
        validate_catalog(doc)
    return [str(p) for p in err.value.problems]


def test_every_stack_level_problem_is_reported_at_once_with_key_value_and_fix() -> None:
    doc = stack_doc(SINGLE_GPU, cluster={"renderDir": " ", "kubeconfig": "/home/me/.kube/config"},
                    namespaces={"serving": "llm", "gateway": "llm"},
                    platform={"kserve": {"alreadyInstalled": False, "version": "1.x"}},
                    serving={"storageClass": "Fast SSD", "apiKeyEnv": "my-key"},
                    modelDefaults={"maxModelLen": 4096, "gpuMemoryUtilisation": 0.9})
    problems = problems_of(doc)
    expected = [
        "stack settings: cluster.renderDir: is empty: give a value, or remove the key to use the default",
        "stack settings: cluster.kubeconfig: '/home/me/.kube/config' names a cluster, but cluster.mode is 'render' "
        "(manifests are written to cluster.renderDir, nothing is applied): set mode: kubeconfig to deploy there, "
        "or remove the key",
        "stack settings: namespaces: namespaces.gateway is 'llm', the serving namespace too",
        "stack settings: platform.kserve.version: version '1.x' is not an exact release; give one such as v0.15.2",
        "stack settings: serving.storageClass: 'Fast SSD' is not a valid StorageClass name",
        "stack settings: serving.apiKeyEnv: 'my-key' is not an environment variable name (letters, digits and "
        "'_', not starting with a digit); use e.g. 'MY_KEY'",
        "stack settings: modelDefaults: unknown key(s) 'gpuMemoryUtilisation': modelDefaults takes the keys of a "
        "models[] entry; 'gpuMemoryUtilisation': did you mean 'gpuMemoryUtilization'? check the spelling against "
        "`python -m tkf_infra schema`",
    ]
    assert len(problems) == len(expected), problems
    for want in expected:
        assert any(p.startswith(want) for p in problems), (want, problems)
    assert "use e.g. 'fast-ssd'" in next(p for p in problems if "storageClass" in p)


def test_a_pool_with_settings_the_api_server_would_refuse_refuses_only_its_models() -> None:
    bad_pool = {"name": "l40s", "gpuProduct": "L40S", "gpusPerNode": 4, "labels": {"team name": "a b"},
                "taints": [{"key": "dedicated", "value": "llm only"}], "nodes": ["GPU_Node_1"]}
    on_bad = {**SINGLE_GPU, "name": "on-l40s", "servedName": "on-l40s", "nodePool": "l40s"}
    doc = stack_doc(SINGLE_GPU, on_bad)
    doc["nodePools"].append(bad_pool)
    cat = validate_catalog(doc)
    assert [m.name for m in cat.models] == [SINGLE_GPU["name"]]
    assert [r.name for r in cat.rejected] == ["on-l40s"]
    text = "\n".join(str(p) for p in cat.pool_problems)
    assert "nodePools[1] l40s: labels: label 'team name' is not a valid key" in text
    assert "label 'a b' is not a valid value" in text
    assert "nodePools[1] l40s: taints[0].value: 'llm only' is not a valid value" in text
    assert "nodePools[1] l40s: nodes: 'GPU_Node_1' is not a valid node name" in text and "'gpu-node-1'" in text


def test_an_eks_pool_whose_sizes_or_ids_cannot_work_is_refused() -> None:
    pool = {"name": "p5", "kind": "eks", "instanceType": "p5.48xlarge", "gpusPerNode": 8, "nodeCount": 5,
            "minSize": 6, "maxSize": 2, "clusterName": "fleet", "nodeRoleArn": "eks-node-role",
            "subnetIds": ["10.0.1.0/24"]}
    doc = stack_doc(SINGLE_GPU)
    doc["nodePools"].append(pool)
    [problem] = validate_catalog(doc).pool_problems
    text = str(problem)
    assert "nodeRoleArn 'eks-node-role' is not an IAM role ARN" in text
    assert "subnetIds: '10.0.1.0/24' is not a subnet id" in text
    assert "minSize 6 is above maxSize 2" in text
    assert "nodeCount 5 (the desired size) is outside minSize..maxSize (6..2)" in text


def test_an_unknown_gpu_on_an_existing_pool_is_a_pool_problem_not_a_traceback() -> None:
    doc = stack_doc(SINGLE_GPU, {**SINGLE_GPU, "name": "b", "servedName": "b", "nodePool": "x"}, CPU)
    doc["nodePools"].append({"name": "x", "gpuProduct": "A100-120GB", "gpusPerNode": 8})
    h = program(doc)
    assert {r.name for r in h.resources if r.type == "tkf:serving:ModelServing"} == {SINGLE_GPU["name"], CPU["name"]}
    assert any("gpuProduct: unknown GPU 'A100-120GB'" in e for e in h.errors()), h.errors()


@pytest.mark.engine
def test_a_misspelt_stack_key_is_named_not_ignored(make_stack: Callable[..., EngineStack]) -> None:
    """Through the engine: the program reads only the keys it knows, so a typo (`promethusUrl`) used to
    vanish; every non-secret `tkf-infra:` key now reaches the strict check."""
    es = make_stack()
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["config"]["tkf-infra:promethusUrl"] = "http://prometheus.monitoring.svc:9090"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, summary, err = run_cli(es, "preview")
    assert code == ExitCode.REFUSED, (code, err)
    assert any("promethusUrl: unknown key (value 'http://prometheus.monitoring.svc:9090')" in e
               for e in summary["errors"]), summary["errors"]
    assert not any("Traceback" in e for e in summary["errors"])
