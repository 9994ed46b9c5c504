"""The gateway-side Pulumi program example (run as __main__ by Pulumi; importable for tests)."""
