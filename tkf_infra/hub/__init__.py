"""Where model facts come from: the Hugging Face Hub (`client`), pinned in models.lock.json (`lock`).

A preview never needs the network: the program reads the lock; only `python -m tkf_infra lock`
talks to the Hub. So `client` (huggingface_hub, httpx: ~0.3 s of imports) is loaded only when used,
not by every preview that reads the lock (issue 18).
"""

from typing import Any

__all__ = ["HubError", "fetch_facts"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tkf_infra.hub import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
