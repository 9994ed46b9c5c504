"""tkf-infra: the whole program is `tkf_infra.program.run` (settings → plan → resources → outputs)."""

from tkf_infra.program import run

run()
