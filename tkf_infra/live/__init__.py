"""What the running fleet reports, read through Prometheus: GPU inventory, capacity, KV-cache calibration.

Modules (each imports only those above it, plus config, sizing, hub.lock, ops.exit_codes):
- prometheus: the one HTTP client (instant queries, failures a user can act on);
- vllm_metrics: vLLM's metric names per release and the KV cache each engine reports;
- inventory: DCGM framebuffer per GPU, and the stack's pools checked against it (used at preview);
- status, status_view: `python -m tkf_infra status` (capacity, and predicted vs. observed KV tokens);
- calibrate: `python -m tkf_infra calibrate` (observed start-ups in the calibration case format).
Nothing here raises on a monitoring outage: an unreachable Prometheus is a warning or an exit code.
"""
