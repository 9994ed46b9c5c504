"""Operator tooling: the `python -m tkf_infra` command line and the Automation API seam it drives."""
