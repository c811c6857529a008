"""Shared test helpers (not tests): small configs, builders, toy workflows and reference
models that several test files import, as `from tests.helpers.<module> import ...`."""
import os

# The repository's root (a str): where subprocess tests run and find experiments/.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
