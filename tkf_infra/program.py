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


def finish(catalog: Catalog, skipped: dict[str, str] | None = None, errors: list[str] | None = None) -> None:
    """End the run non-zero when entries were left out, after every good resource is registered.

    `pulumi.log.error` alone does not fail a Python program; raising at the very end does, and the
    SDK waits for all registrations before reporting it, so the healthy models still deploy.
    """
    left_out = [r.name or f"models[{r.index}]" for r in catalog.rejected] + list(skipped or {})
    if errors and not left_out:
        raise pulumi.RunError(f"{len(errors)} fleet problem(s), reported above; the models were deployed but "
                              "the fleet needs fixing")
    if left_out:
        deployed = len(catalog.models) - len(skipped or {})
        raise pulumi.RunError(
            f"{len(left_out)} catalog entr{'y was' if len(left_out) == 1 else 'ies were'} left out "
            f"({', '.join(left_out)}); the other {deployed} were deployed. Fix the errors above and run again."
        )
