"""Shared test helpers (not tests): small configs, builders, toy workflows and reference
models that several test files import, as `from tests.helpers.<module> import ...`."""
