"""What the running fleet reports, read through Prometheus and the cluster: GPU inventory, capacity, each
model's phase, KV-cache calibration. Its modules and what they may import: docs/architecture.md (checked).

Nothing here raises on a monitoring outage: an unreachable Prometheus is a warning or an exit code.
"""
