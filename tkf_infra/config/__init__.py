"""Stack settings and the model catalog: their shapes, their rules, and where they are read from.

Its modules and what they may import: docs/architecture.md (checked by tests/test_architecture_map.py).
"""

from tkf_infra.config.base import Problem, SettingsError
from tkf_infra.config.catalog import Backend, Cost, ModelEntry, Topology
from tkf_infra.config.flags import Mode
from tkf_infra.config.node_pool import NodePool, Taint
from tkf_infra.config.platform import Component, GpuOperatorSettings, Platform
from tkf_infra.config.reader import catalog_json_schema, read_pulumi_config, read_stack_file
from tkf_infra.config.stack import ClusterTarget, Namespaces, Serving, StackSettings
from tkf_infra.config.validate import Catalog, Rejected, deep_merge, validate_catalog

__all__ = [
    "Backend", "Catalog", "ClusterTarget", "Component", "Cost", "GpuOperatorSettings", "Mode", "ModelEntry",
    "Namespaces", "NodePool", "Platform", "Problem", "Rejected", "Serving", "SettingsError", "StackSettings",
    "Taint", "Topology", "catalog_json_schema", "deep_merge", "read_pulumi_config", "read_stack_file",
    "validate_catalog",
]
