"""Tests and fixtures that run against a real kube-apiserver (tkf-kube-apiserver)."""

import pytest

# Test modules import these before `pytest_plugins` registers the plugin; marking them here makes
# pytest rewrite their asserts and avoids its "already imported" warning.
pytest.register_assert_rewrite("tests.kube.apiserver", "tests.kube.client")
