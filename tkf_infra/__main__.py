"""`python -m tkf_infra`."""

from tkf_infra.cli import main

main()
