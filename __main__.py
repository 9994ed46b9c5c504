"""tkf-infra: validate the stack's settings, build the fleet, publish the outputs."""

import pulumi

from components.fleet import build_fleet
from tkf_infra.lock import load_lock
from tkf_infra.outputs import export_outputs
from tkf_infra.program import finish, load_catalog

catalog = load_catalog()
api_key = pulumi.Config().get_secret("apiKey")
fleet = build_fleet(catalog, lock=load_lock(), api_key=api_key, stack=pulumi.get_stack())
export_outputs(catalog, fleet, api_key)
finish(catalog, {**fleet.skipped, **fleet.fit_failures}, fleet.errors)
