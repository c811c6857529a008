"""Shared pytest setup: CPU, float32 matmuls, deterministic hypothesis profile, test tiers.

Two tiers: tests marked `@pytest.mark.slow` (subprocess runs, 8 fake devices, the LLM-size
and real-game tests, multi-run training) are skipped unless `--run-slow` is given.
`python -m pytest -q -n 2 tests` is the fast tier; `... tests --run-slow` runs everything
(what CI, .ci/run, runs); `... tests --run-slow -m slow` runs the slow tier alone.
"""
import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.load_profile("ci")


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the tests marked slow (CI's .ci/run does)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: subprocess, multi-device, LLM-size or real-game test; "
                   "skipped unless --run-slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow tier: run with --run-slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
