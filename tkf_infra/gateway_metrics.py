"""The gateway's own Prometheus series that tkf-infra reads, and its retry schedule: what wakes a model scaled
to zero, and what holds the request that woke it until a replica answers.

Why the gateway's and not vLLM's: at zero replicas no vLLM exists to count anything, while the gateway
sees every request for the model first. The names are LiteLLM 1.110.2's (requirements-dev.txt pins it;
litellm/integrations/prometheus.py): `litellm_proxy_total_requests_metric` is a prometheus_client Counter,
exposed with the `_total` suffix, incremented for answered requests (`async_log_success_event`) and failed
ones (`async_post_call_failure_hook`) alike, with `requested_model` the name the client asked for (kept
only if the router knows it: every `model_list` entry's `model_name` is). The real-LiteLLM test
(tests/prom/test_gateway_wake.py) fails if either side renames them.
"""

from __future__ import annotations

import math
from typing import Any

REQUESTS = "litellm_proxy_total_requests_metric_total"
MODEL_LABEL = "requested_model"
#: Calls the gateway made to a deployment that failed, by the status the deployment answered
#: (`litellm_deployment_failure_responses`, litellm/integrations/prometheus.py of 1.110.2, labels from
#: litellm/types/integrations/prometheus.py `litellm_deployment_failure_responses`): a 401 there is vLLM
#: refusing the key the gateway holds. `model_group` is the `model_list` entry's `model_name` (the served name).
DEPLOYMENT_FAILURES = "litellm_deployment_failure_responses_total"
EXCEPTION_STATUS_LABEL = "exception_status"
MODEL_GROUP_LABEL = "model_group"
#: The LiteLLM callback that exports these series; the gateway's `litellm_settings.callbacks` must hold it.
CALLBACK = "prometheus"


def gateway_settings(endpoints: dict[str, Any]) -> dict[str, Any]:
    """The `litellm_settings` the gateway's config needs for the published endpoints: the Prometheus callback
    when some model scales to zero (its wake signal), nothing otherwise."""
    at_zero = any(((e or {}).get("scaling") or {}).get("minReplicas") == 0 for e in endpoints.values())
    return {"litellm_settings": {"callbacks": [CALLBACK]}} if at_zero else {}


#: LiteLLM 1.110.2's retry backoff (litellm/constants.py `INITIAL_RETRY_DELAY`, `MAX_RETRY_DELAY`;
#: litellm/utils.py `calculate_retry_after`: retry i sleeps min(0.5 × 2^i, 8) s plus up to 0.75 s of jitter).
#: tests/prom/test_gateway_cold_start.py compares them with the installed LiteLLM's.
INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0


def retries_spanning(seconds: float) -> int:
    """The fewest LiteLLM retries whose backoff alone (jitter left out, so at least this) spans `seconds`.

    Why: a model at zero refuses the request that wakes it (its Service has no endpoint yet), and LiteLLM
    retries a refused connection; a deployment's `num_retries` this large holds that first request until
    a replica answers, within the published cold start."""
    waited, retries = 0.0, 0
    while waited < seconds and INITIAL_RETRY_DELAY * 2 ** retries < MAX_RETRY_DELAY:
        waited += INITIAL_RETRY_DELAY * 2 ** retries
        retries += 1
    return retries + max(0, math.ceil((seconds - waited) / MAX_RETRY_DELAY))
