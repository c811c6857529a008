"""The ToyTree searches of the search loop's tests (tests/asct_jax/search/test_search.py,
test_search_stages.py): the environment (tiny_workflow's ToyTree of 4 actions, depth 3),
random policy logits and roots, one jitted search per (rules, config), the paper's rules
with a depth cap (RULE_CFGS) and the module-scoped fixture `rule_runs`: one batch of
searches per rule, which a test module takes by importing it.
"""
import functools

import jax
import numpy as np
import pytest

from asct_jax import search as S
from tests.helpers.tiny_workflow import TOY as ENV, toy_roots as roots

K = ENV.num_actions


def random_logits(seed=0):
    return np.random.default_rng(seed).normal(size=(ENV.num_nodes, K)).astype(np.float32)


def make_rules(selection, expansion=S.uniform_expansion, continuation=S.uniform_continuation):
    return S.SearchRules(selection, expansion, continuation)


UNIFORM_ACTOR = make_rules(S.uniform, continuation=S.actor_continuation)   # pi_old suffixes
DEPTH2_UNIFORM = S.SearchConfig(num_simulations=64, max_depth=2, node_policy=True)


@functools.lru_cache(maxsize=None)
def jit_search(rules, config):
    """One compiled search per (rules, config); policy logits and params are traced
    inputs."""

    def fn(params, logits, values, states, key):
        pi = ENV.policy_fn(params, logits, values)
        return S.search(ENV, params, states, pi, key, rules, config)

    return jax.jit(fn)


def run_search(rules, config, params, b, logits=None, values=None, seed=0):
    logits = random_logits() if logits is None else logits
    values = np.zeros(ENV.num_nodes, np.float32) if values is None else values
    out = jit_search(rules, config)(
        params, logits, values, roots(params, b, seed), jax.random.PRNGKey(seed + 1))
    return jax.device_get(out)


RULE_CFGS = {  # rule -> (SearchRules, SearchConfig): the paper's, with a depth cap of 3
    "uniform": (make_rules(S.uniform), S.SearchConfig(num_simulations=64, max_depth=3)),
    "uct": (make_rules(functools.partial(S.uct, c_exp=1.0)), S.SearchConfig(num_simulations=64, max_depth=3)),
    "agentuct": (make_rules(functools.partial(S.agentuct, c_exp=1.0, c_tok=0.1),
                            functools.partial(S.cost_weighted_expansion, c_tok=0.1),
                            functools.partial(S.cost_weighted_continuation, c_tok=0.1)),
                 S.SearchConfig(num_simulations=64, max_depth=3)),
    "uniform_actor": (UNIFORM_ACTOR, DEPTH2_UNIFORM),
}


@pytest.fixture(scope="module")
def rule_runs():
    params = ENV.make_params(seed=0)  # costs 1, 3, 9, 27; all 4 root actions legal
    return params, {r: run_search(*sc, params, b=32, seed=11) for r, sc in RULE_CFGS.items()}
