"""A Helm post-renderer that drops every object of the kinds named on its command line.

Why: a chart may render an object unconditionally that tkf-infra must not apply (WVA v0.7.0's
ServiceMonitor, components/wva.py), and a Pulumi transform cannot remove a chart's child, only change
it. Helm pipes the rendered manifests through this program before the provider registers them, so the
object never exists: not in preview, not in render mode's directory, not on the cluster.

Run by Helm as ``python helm_drop_kinds.py KIND [KIND ...]``: manifests on stdin, the rest on stdout.
Standalone on purpose (only PyYAML): Helm runs it outside the Pulumi program.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

import yaml

#: A YAML document separator line, as Helm writes them between templates.
_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)


def drop_kinds(manifests: str, kinds: Iterable[str]) -> str:
    """``manifests`` without the documents whose kind is in ``kinds``; every other document byte for byte.

    Why textual: re-dumping parsed YAML may re-quote or re-type values (timestamps, big numbers), and the
    objects kept must be exactly what the chart rendered. Each document is parsed only to read its kind.
    """
    unwanted = set(kinds)
    kept = []
    for text in _SEPARATOR.split(manifests):
        doc = yaml.safe_load(text)
        if doc is None:
            continue
        if not (isinstance(doc, dict) and doc.get("kind") in unwanted):
            kept.append(text.strip("\n"))
    return "".join(f"---\n{text}\n" for text in kept)


if __name__ == "__main__":
    sys.stdout.write(drop_kinds(sys.stdin.read(), sys.argv[1:]))
