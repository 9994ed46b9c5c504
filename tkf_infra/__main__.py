"""`python -m tkf_infra`."""

from tkf_infra.ops.cli import main

main()
