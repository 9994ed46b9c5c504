"""Stack settings and the model catalog: their shapes, their rules, and where they are read from.

- `base`: the YAML key style and how a problem is reported;
- `flags`: the serving-flag table (`ServingSpec`): every catalog field that becomes a vLLM flag;
- `catalog`: one entry (`ModelEntry`) and the GPU arithmetic rule;
- `stack`: cluster, namespaces, node pools, platform pieces, serving defaults;
- `charts`: the platform charts' facts the settings check (vendored versions, hard-coded namespaces);
- `validate`: raw document → `Catalog` (strict for the stack, per item for pools and entries);
- `reader`: the engine's config, a committed stack file, the JSON Schema.
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
