"""Tests of the selection and expansion rules (asct_jax.search.selection) on the
statistics of one node: the paper's formulas by hand, ties at random, untried children
first, never an illegal candidate."""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, strategies as st

from asct_jax import search as S


def _stats(child_visits, vsum, mask=None, t_hat=None, visits=None, logp=None, costs=None):
    k = len(child_visits)
    return S.NodeStats(
        child_visits=jnp.asarray(child_visits, jnp.int32),
        child_value_sum=jnp.asarray(vsum, jnp.float32),
        prior_logp=jnp.zeros(k) if logp is None else jnp.asarray(logp, jnp.float32),
        mask=jnp.asarray([True] * k if mask is None else mask),
        costs=jnp.ones(k) if costs is None else jnp.asarray(costs, jnp.float32),
        value=jnp.float32(0.0),
        t_hat=None if t_hat is None else jnp.asarray(t_hat, jnp.float32),
        visits=None if visits is None else jnp.int32(visits))


def _picks(rule, node, n=400):
    keys = jax.random.split(jax.random.PRNGKey(7), n)
    return np.asarray(jax.jit(jax.vmap(rule, in_axes=(0, None)))(keys, node))


def test_agentuct_scores_by_hand():
    # u_bar = [0.5, 0.8, 0.0], n(v) = 3, n(v,a) = [2, 1, 0], T_hat = [1000, 5000, 10]:
    #   log(3 + 1) = 1.3862944
    #   S(0) = 0.5 + 1.4 sqrt(1.3862944 / 2) - 1e-4 * 1000 = 0.5 + 1.1655765 - 0.1 = 1.5655765
    #   S(1) = 0.8 + 1.4 sqrt(1.3862944 / 1) - 1e-4 * 5000 = 0.8 + 1.6483740 - 0.5 = 1.9483740
    #   S(2) = +inf (untried)
    u, n, t = jnp.array([0.5, 0.8, 0.0]), jnp.array([2, 1, 0]), jnp.array([1000.0, 5000.0, 10.0])
    s = np.asarray(S.agentuct_scores(u, jnp.int32(3), n, t, c_exp=1.4, c_tok=1e-4))
    np.testing.assert_allclose(s[:2], [1.5655765, 1.9483740], rtol=1e-6)
    assert s[2] == np.inf
    np.testing.assert_allclose(np.asarray(S.uct_scores(u, jnp.int32(3), n))[:2],
                               [1.6655765, 2.4483740], rtol=1e-6)
    # Batched [..., K] with n_node [...]; the defaults are c_exp = 1.4, c_tok = 1e-4.
    sb = S.agentuct_scores(jnp.stack([u, u]), jnp.array([3, 3]), jnp.stack([n, n]), jnp.stack([t, t]))
    np.testing.assert_allclose(np.asarray(sb), np.stack([s, s]), rtol=1e-6)
    # The rule takes the argmax of S once every child is tried: a1 here.
    node = _stats([2, 1, 1], [1.0, 0.8, 0.0], t_hat=[1000.0, 5000.0, 10.0], visits=3)
    assert int(jax.jit(S.agentuct)(jax.random.PRNGKey(0), node)) == 1


def test_uniform_least_visited_and_ties_at_random():
    # Fully expanded: the least-visited selectable child (a3 is masked).
    assert set(_picks(S.uniform, _stats([3, 1, 2, 1], [0, 5, 0, 9], [True, True, True, False]))) == {1}
    # Ties among the least visited at random, both taken.
    assert set(_picks(S.uniform, _stats([2, 1, 1, 3], [9, 0, 0, 0]))) == {1, 2}


def test_untried_first_and_cost_weighted_expansion():
    """Untried children score +inf: UCT draws them uniformly, AgentUCT with probability
    proportional to exp(-c_tok T_hat): [1, e^-1, e^-2] / sum for T_hat [0, 1e4, 2e4]."""
    node = _stats([0, 0, 0, 4], [0, 0, 0, 40], t_hat=[0.0, 1e4, 2e4, 0.0], visits=4)
    freq_uct = np.bincount(_picks(S.uct, node, 3000), minlength=4) / 3000
    np.testing.assert_allclose(freq_uct, [1 / 3, 1 / 3, 1 / 3, 0], atol=0.04)
    freq = np.bincount(_picks(S.agentuct, node, 3000), minlength=4) / 3000
    p = np.exp(-np.arange(3.0)) / np.exp(-np.arange(3.0)).sum()
    np.testing.assert_allclose(freq, [*p, 0], atol=0.04)
    # The expansion rules draw the same way; they report whether any child is untried.
    has, _ = jax.jit(S.cost_weighted_expansion)(jax.random.PRNGKey(0), node)
    drawn = np.asarray(jax.jit(jax.vmap(lambda k: S.cost_weighted_expansion(k, node)[1]))(
        jax.random.split(jax.random.PRNGKey(8), 3000)))
    np.testing.assert_allclose(np.bincount(drawn, minlength=4) / 3000, [*p, 0], atol=0.04)
    full = _stats([1, 2, 1, 4], [0, 0, 0, 0], visits=8)
    assert bool(has) and not bool(jax.jit(S.uniform_expansion)(jax.random.PRNGKey(0), full)[0])


_RULES_JIT = {r.__name__: jax.jit(r) for r in (S.uniform, S.uct, S.agentuct, S.prior_sample)}
_EXPANSIONS_JIT = {r.__name__: jax.jit(r) for r in (S.uniform_expansion, S.cost_weighted_expansion)}


@given(
    mask=st.lists(st.booleans(), min_size=5, max_size=5).filter(any),
    visits=st.lists(st.integers(0, 5), min_size=5, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_rules_never_pick_illegal(mask, visits, seed):
    rng = np.random.default_rng(seed)
    logp = np.where(np.asarray(mask) & (rng.random(5) < 0.8), rng.normal(size=5), -np.inf)
    logp[int(np.flatnonzero(mask)[0])] = 0.0
    node = _stats(visits, rng.normal(size=5) * np.array(visits), mask, logp=logp,
                  costs=rng.random(5) * 10)
    for rule, fn in _RULES_JIT.items():
        a = int(fn(jax.random.PRNGKey(seed), node))
        assert mask[a], (rule, a, mask)
    untried = np.asarray(mask) & (np.asarray(visits) == 0)
    for rule, fn in _EXPANSIONS_JIT.items():
        has, a = fn(jax.random.PRNGKey(seed), node)
        assert bool(has) == untried.any() and (not untried.any() or untried[int(a)]), rule
