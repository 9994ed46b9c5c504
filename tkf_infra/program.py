"""How the Pulumi program turns stack settings into a catalog, and reports what it left out.

Kept apart from __main__.py so unit tests under mocks run exactly the same steps.
"""

from __future__ import annotations

import pulumi

from tkf_infra.settings import Catalog, SettingsError, read_pulumi_config, validate_catalog


def load_catalog() -> Catalog:
    """Read and validate the stack settings; log every rejected entry as an error.

    A rejected entry is logged with `pulumi.log.error`, which makes the run end non-zero while the
    healthy entries are still registered: one bad model must not block the others. Settings that
    cannot be used at all (or any bad entry under `strict: true`) stop the run with one readable
    message and no traceback.
    """
    try:
        catalog = validate_catalog(read_pulumi_config())
    except SettingsError as err:
        raise pulumi.RunError(err.render()) from None
    for rejected in catalog.rejected:
        reasons = "\n".join(f"  - {p}" for p in rejected.problems)
        label = rejected.problems[0].where if rejected.problems else f"models[{rejected.index}]"
        pulumi.log.error(f"{label} was left out of this deployment:\n{reasons}")
    return catalog


def finish(catalog: Catalog) -> None:
    """End the run non-zero when entries were left out, after every good resource is registered.

    `pulumi.log.error` alone does not fail a Python program; raising at the very end does, and the
    SDK waits for all registrations before reporting it, so the healthy models still deploy.
    """
    if catalog.rejected:
        names = ", ".join(r.name or f"models[{r.index}]" for r in catalog.rejected)
        raise pulumi.RunError(
            f"{len(catalog.rejected)} catalog entr{'y was' if len(catalog.rejected) == 1 else 'ies were'} left out "
            f"({names}); the other {len(catalog.models)} were deployed. Fix the errors above and run again."
        )
