"""Shared fixtures: the real-engine helpers (tests/engine_fixtures.py) and the Hub-compatible server
(tests/hub_server.py) are available to every tier."""

pytest_plugins = ["tests.engine_fixtures", "tests.kube.apiserver", "tests.hub_server"]
