"""Shared pytest setup: CPU, XLA at O0 with one persistent compilation cache for the run,
deterministic hypothesis profile, test tiers.

Two tiers: tests marked `@pytest.mark.slow` (subprocess runs, 8 fake devices, the LLM-size
and real-game tests, multi-run training, and every test that took 15 s or more in a
fresh-clone run of the fast tier: 2026-12-07, `--durations=0`) are skipped unless
`--run-slow` is given.
`python -m pytest -q -n 2 tests` is the fast tier; `... tests --run-slow` runs everything
(what CI, .ci/run, runs); `... tests --run-slow -m slow` runs the slow tier alone.
"""
import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent XLA cache for the whole run, created by the run itself in the clone's
# .pytest_cache/ (git-ignored): a program compiled once (same computation, shapes, flags)
# is read back by every later test, by the other xdist worker and by subprocess tests,
# also after a module's jax.clear_caches(). The base config's train.compilation_cache
# follows JAX_COMPILATION_CACHE_DIR, so the trainers under test use the same directory.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(_ROOT, ".pytest_cache", "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# Tests compile at XLA:CPU's backend optimisation level 0 unless XLA_FLAGS sets a level:
# their programs are small and compile-bound, and O0 compiles them in about half the time
# for slower steps (docs/benchmarks.md: numbers within 1e-9 relative of the default's,
# every comparison inside one run at one level). A test that checks bit for bit against
# something made at the default level runs it in a subprocess without this flag.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_backend_optimization_level=0").strip()

from hypothesis import settings  # noqa: E402

# Hypothesis: 25 examples per property with --run-slow (CI), 10 in the fast tier; both
# derandomized (the same examples every run). A test's own @settings overrides; a count
# above 10 is written examples(n) (tests/helpers/tiers.py): n in CI, 10 in the fast tier.
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("fast", max_examples=10, deadline=None, derandomize=True)
settings.load_profile("ci")


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the tests marked slow (CI's .ci/run does)")


def pytest_configure(config):
    from tests.helpers import tiers

    tiers.slow = config.getoption("--run-slow")   # before any test module is imported
    settings.load_profile("ci" if tiers.slow else "fast")
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


def _credit_setup(config, num_groups: int = 2, group_size: int = 2):
    """(config, CreditContext, params, rollout batch) of `config` (rollout.num_groups and
    group_size set to the given ones): the fresh policy of its environment and one batch
    it played from key 0, what the credit-method tests feed the methods."""
    import jax

    from asct_jax.rl.credit import CreditContext
    from asct_jax.rl.rollout import rollout
    from asct_jax.rl.build import build_policy
    from asct_jax.rl.sources import JaxEnvSource

    config.rollout.num_groups, config.rollout.group_size = num_groups, group_size
    source = JaxEnvSource(config)
    env, env_params = source.env, source.env_params
    policy, params = build_policy(config, source.vocab_size, source.shape)
    ctx = CreditContext(policy=policy, env=env, env_params=env_params, group_size=group_size)
    batch = jax.jit(lambda p, k: rollout(policy, p, env, env_params, k, num_groups,
                                         group_size))(params, jax.random.key(0))
    return config, ctx, params, batch


@pytest.fixture(scope="session")
def credit_setup():
    """The builder of a credit-method test's setup: credit_setup(config) -> (config, ctx,
    params, batch) (_credit_setup); a module's fixture calls it with its own config."""
    return _credit_setup


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Frees each test module's compiled programs when it ends (jax.clear_caches): every
    XLA CPU executable keeps memory mappings, and a pytest worker that compiles a whole
    tier's programs without releasing them passes the kernel's vm.max_map_count (65530)
    and segfaults in its next compile (measured: ~9,000 mappings after one test file)."""
    yield
    import gc

    import jax
    jax.clear_caches()
    gc.collect()
