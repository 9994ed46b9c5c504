"""Copyable examples (CI workflow, gateway program); a package so type checkers tell its __main__ from the project's."""
