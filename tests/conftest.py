"""Shared fixtures: the real-engine helpers (tests/engine_fixtures.py) are available to every tier."""

pytest_plugins = ["tests.engine_fixtures", "tests.kube.apiserver"]
