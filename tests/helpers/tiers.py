"""The test tier in effect (tests/conftest.py's pytest_configure sets `slow` before any
test module is imported), for what a test sizes by tier."""
FAST_EXAMPLES = 10     # the "fast" hypothesis profile's count (tests/conftest.py)
slow = False


def examples(n: int) -> int:
    """A property's hypothesis examples: its own n with --run-slow (CI, .ci/run), at most
    the fast profile's count in the fast tier (the README's test command)."""
    return n if slow else min(n, FAST_EXAMPLES)
