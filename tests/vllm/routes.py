"""Every route of the vLLM API server a pod runs, listed by vLLM itself: run in the vLLM virtualenv.

``<vllm-venv>/bin/python -m tests.vllm.routes < {"argv": ["vllm", "serve", ...], "tasks": [...]}`` (from the
repository root)
prints ``[{"kind", "path", "methods", "schema"}, ...]``: the routes of the FastAPI app vLLM 0.32.0
builds for that command line, its model's config and those supported tasks (``vllm/entrypoints/launchers/app.py``
``build_app``: the routers, endpoint plugins, SageMaker's routes, the ``/metrics`` mount), including
the ones left out of ``openapi.json`` (``include_in_schema=False``, mounts). The test compares the
schema routes with the live server's ``openapi.json``, so this listing is the running app's.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any


def list_routes(argv: list[str], tasks: list[str]) -> list[dict[str, Any]]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.app import build_app

    from tests.vllm.oracle import _parser  # the CLI's own parser, built as `vllm` builds it

    parser, _ = _parser()
    args = parser.parse_args(argv[1:])
    if getattr(args, "model_tag", None) is not None:  # as `vllm serve` does (vllm/entrypoints/cli/serve.py)
        args.model = args.model_tag
    # The model's config decides some routes (a pooling model's /pooling, /score, /rerank): built from
    # the same arguments as the server builds it (reads the model's config.json, loads no weights).
    model_config = AsyncEngineArgs.from_cli_args(args).create_model_config()
    app = build_app(args, tuple(tasks), model_config)
    out = []
    for route in app.routes:
        out.append({"kind": type(route).__name__, "path": getattr(route, "path", None),
                    "methods": sorted(getattr(route, "methods", None) or []),
                    "schema": bool(getattr(route, "include_in_schema", False))})
    return out


def main() -> None:
    request = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):  # vLLM logs at import; keep stdout for the JSON
        routes = list_routes(request["argv"], request["tasks"])
    json.dump(routes, sys.stdout)


if __name__ == "__main__":
    main()
