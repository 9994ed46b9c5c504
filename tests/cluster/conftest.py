"""Fixtures of the cluster tier (tests/cluster/harness.py):

- ``cluster`` (package): one running cluster — API server with the scheduler and the controllers, kwok,
  the provisioner and the device plugin — shared by the tests of this folder that make their own nodes
  (``make_nodes``) and namespaces. A test that needs a cluster of its own (a whole `up`, another scheduler
  profile) uses ``harness.running_cluster`` itself.
- ``kube`` (package): a KubeClient on it (replaces the session server's ``kube`` here).
- ``cluster_namespace`` (function): a fresh namespace, deleted afterwards (not waited for).
- ``fleet`` (function): a cluster of its own with admission webhooks, and ``fleet.up(models, ...)``: the prod
  pool's nodes (and a system node), a stack aimed at them, KServe's and LWS's managers, one watched `up` of
  the CLI (``fleet.again()`` runs it once more, ``fleet.status()`` is the CLI's `status`); ``fleet_up`` is
  ``fleet.up``.
- ``make_nodes`` (function): ``make_nodes(pool, **pool_nodes_options)`` creates a pool's Nodes
  (``nodes.pool_nodes``) named and labelled for this test alone (label ``GROUP_LABEL``: a pod that selects
  it lands only on them), waits until they are Ready, and deletes them after the test; returns their
  names. Test pods select ``{GROUP_LABEL: group}``, the group being ``node_group(names)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.fleet import Fleet, UpRun, own_cluster
from tests.cluster.harness import Cluster, running_cluster
from tests.cluster.nodes import create_nodes, pool_nodes
from tests.engine_fixtures import EngineStack
from tests.kube.client import KubeClient

GROUP_LABEL = "tkf.test/node-group"
MakeNodes = Callable[..., list[str]]


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("cluster"))) as c:
        yield c
        c.check_alive()


@pytest.fixture(scope="package")
def kube(cluster: Cluster) -> Iterator[KubeClient]:
    with cluster.client() as client:
        yield client


@pytest.fixture
def cluster_namespace(kube: KubeClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete("v1", "Namespace", name)


@pytest.fixture
def make_nodes(kube: KubeClient, cluster: Cluster) -> Iterator[MakeNodes]:
    made: list[str] = []

    def make(pool: Mapping[str, Any], **options: Any) -> list[str]:
        group = uuid.uuid4().hex[:8]
        count = int(pool.get("nodeCount", 1))
        names = [f"{pool['name']}-{group}-{i}" for i in range(count)]
        # Named in the pool (`nodes`), as a MIG pool must list them.
        nodes = pool_nodes({**pool, "nodes": names}, extra_labels={GROUP_LABEL: group}, **options)
        made.extend(names)
        return create_nodes(kube, nodes)

    yield make
    for name in made:
        kube.delete("v1", "Node", name)
    cluster.check_alive()


def node_group(kube: KubeClient, name: str) -> dict[str, str]:
    """The nodeSelector of the test group ``name`` (a node made by ``make_nodes``) belongs to."""
    node = kube.get("v1", "Node", name) or {}
    return {GROUP_LABEL: node["metadata"]["labels"][GROUP_LABEL]}


@pytest.fixture
def fleet(make_stack: Callable[..., EngineStack], lean_engine_env: dict[str, str],
          tmp_path: Path) -> Iterator[Fleet]:
    with own_cluster(tmp_path, make_stack, lean_engine_env) as f:
        yield f


@pytest.fixture
def fleet_up(fleet: Fleet) -> Callable[..., UpRun]:
    return fleet.up
