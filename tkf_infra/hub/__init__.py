"""Where model facts come from: the Hugging Face Hub (`client`), pinned in models.lock.json (`lock`).

A preview never needs the network: the program reads the lock; only `python -m tkf_infra lock`
talks to the Hub.
"""

from tkf_infra.hub.client import HubError, fetch_facts

__all__ = ["HubError", "fetch_facts"]
