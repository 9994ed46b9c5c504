"""Dynamic providers. Importing this package must have no side effects: the engine re-imports it."""
