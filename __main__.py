"""tkf-infra: the whole program is `tkf_infra.program.run` (settings → plan → resources → outputs).

The engine reads the run needs begin first, in threads, so they overlap the program's imports
(`tkf_infra.early_reads`)."""

from tkf_infra.early_reads import start

start()

from tkf_infra.program import run  # noqa: E402

run()
