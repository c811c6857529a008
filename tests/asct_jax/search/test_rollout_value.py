"""Tests of asct_jax.search.rollout_value on ToyTree (tests/helpers/tiny_workflow.TOY: 4
actions, depth 3): mc_return's M rollouts are rollout_return's with the keys
split(key, M) (the returns one by one, their mean, the tokens and steps summed); a
deterministic environment and policy give every rollout the exact return-to-go of a
restored state, its tokens and steps (a NumPy walk of the tables; 0 and no step from a done
state), with and without rekey; the rekey semantics of the module docstring on noisy
rewards (without rekey the rollouts share the state's environment randomness: the state's
key decides the noise, the policy's key does not; with rekey the state's key is replaced,
so each rollout draws its own noise and the state's key does not matter); a StateActor is
played as given and stopped after env.max_turns steps; num_rollouts < 1 and rekey of a
state without a key are rejected.

The Monte-Carlo mean against ToyTree's exact values is in test_search.py.
"""
import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.envs.base import EOS_ID, PAD_ID
from asct_jax.envs.play import Choice, StateActor
from asct_jax.search.rollout_value import mc_return, rollout_return
from tests.helpers.tiny_workflow import TOY as ENV

M = 3
K, T = ENV.num_actions, ENV.max_turns


@functools.partial(jax.jit, static_argnames="rekey")
def _mc(params, logits, state, key, rekey):
    return mc_return(ENV, params, state, ENV.policy_fn(params, logits), key, M, rekey)


@functools.partial(jax.jit, static_argnames="rekey")
def _one(params, logits, state, key, rekey):
    return rollout_return(ENV, params, state, ENV.policy_fn(params, logits), key, rekey)


def _reset(params, seed):
    return ENV.reset(jax.random.PRNGKey(seed), params)[0]


def _deterministic_logits(rng):
    """A table policy that always takes the legal action of the highest rank: ranks 1000
    apart, so no Gumbel draw can change the argmax."""
    return np.stack([rng.permutation(K) for _ in range(ENV.num_nodes)]).astype(np.float32) * 1000


def _walk(params, logits, node, turn):
    """NumPy: (return, tokens, steps) of the argmax-of-legal policy from (node, turn) on the
    noiseless tables, to a terminating edge or the T-th turn."""
    legal, term = np.asarray(params.legal), np.asarray(params.terminates)
    rew, costs = np.asarray(params.rewards, np.float64), np.asarray(params.costs, np.float64)
    g = tok = 0.0
    steps = 0
    while turn < T:
        a = int(np.argmax(np.where(legal[node], logits[node], -np.inf)))
        g, tok, steps, turn = g + rew[node, a], tok + costs[a], steps + 1, turn + 1
        if term[node, a]:
            break
        node = node * K + a + 1
    return g, tok, steps


@given(seed=st.integers(0, 10_000), noise=st.sampled_from([0.0, 0.5]),
       key=st.integers(0, 2**31 - 1), rekey=st.booleans())
def test_mc_return_is_the_mean_of_rollouts_with_split_keys(seed, noise, key, rekey):
    params = ENV.make_params(seed=seed, reward_noise=noise)
    logits = np.random.default_rng(seed).normal(size=(ENV.num_nodes, K)).astype(np.float32)
    state = _reset(params, seed)
    mean, rets, tok, calls = _mc(params, logits, state, jax.random.PRNGKey(key), rekey)
    assert rets.shape == (M,) and rets.dtype == jnp.float32
    assert mean.shape == tok.shape == calls.shape == ()
    assert mean.dtype == tok.dtype == jnp.float32 and calls.dtype == jnp.int32
    singles = [_one(params, logits, state, k, rekey)
               for k in jax.random.split(jax.random.PRNGKey(key), M)]
    g, t, c = (np.array([float(s[i]) for s in singles]) for i in range(3))
    np.testing.assert_allclose(np.asarray(rets), g, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(float(mean), g.mean(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(float(tok), t.sum(), rtol=1e-6)
    assert int(calls) == c.sum() and np.all((c >= 1) & (c <= T))


@given(seed=st.integers(0, 10_000), start_steps=st.integers(0, T - 1), done=st.booleans(),
       rekey=st.booleans())
def test_deterministic_rollouts_give_the_exact_return_to_go(seed, start_steps, done, rekey):
    """From a restored state (the node after `start_steps` moves, its return so far not
    0): every rollout's return is the rewards after the state, tokens and steps those of
    the path; a done state gives 0 and takes no step."""
    rng = np.random.default_rng(seed)
    params = ENV.make_params(seed=seed)  # no reward noise
    logits = _deterministic_logits(rng)
    legal, term = np.asarray(params.legal), np.asarray(params.terminates)
    node, turn = 0, 0
    for _ in range(start_steps):  # a random path of moves that do not end the episode
        moves = np.flatnonzero(legal[node] & ~term[node])
        if len(moves) == 0:
            break
        node, turn = node * K + int(rng.choice(moves)) + 1, turn + 1
    state = _reset(params, seed).replace(
        node=jnp.int32(node), turn=jnp.int32(turn), done=jnp.array(done),
        ret=jnp.float32(rng.normal()))
    g, tok, steps = (0.0, 0.0, 0) if done else _walk(params, logits, node, turn)
    mean, rets, toks, calls = _mc(params, logits, state, jax.random.PRNGKey(seed), rekey)
    np.testing.assert_allclose(np.asarray(rets), np.full(M, g), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(float(mean), g, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(float(toks), M * tok, rtol=1e-6)
    assert int(calls) == M * steps


def test_rekey_semantics_with_noisy_rewards():
    params = ENV.make_params(seed=3, reward_noise=1.0)
    logits = _deterministic_logits(np.random.default_rng(3))
    state = _reset(params, 0)
    other = state.replace(key=jax.random.PRNGKey(99))
    k1, k2 = jax.random.PRNGKey(1), jax.random.PRNGKey(2)
    rets = lambda s, k, rekey: np.asarray(_mc(params, logits, s, k, rekey)[1])  # noqa: E731
    # Without rekey: one action path, one environment key -> one return, whatever the
    # policy's key; another state key draws other noise.
    shared = rets(state, k1, False)
    assert np.all(shared == shared[0])
    np.testing.assert_array_equal(rets(state, k2, False), shared)
    assert np.all(rets(other, k1, False) != shared[0])
    # With rekey: each rollout its own environment key -> M different returns, none of
    # them the shared one; the state's own key is replaced, so it does not matter.
    fresh = rets(state, k1, True)
    assert len(np.unique(fresh)) == M and not np.any(fresh == shared[0])
    np.testing.assert_array_equal(rets(other, k1, True), fresh)
    assert not np.array_equal(rets(state, k2, True), fresh)


def test_state_actor_is_stopped_after_max_turns():
    """A StateActor that always writes an unparseable action (nothing happens, reward 0)
    from a state whose turn counter is far from the environment's own timeout: only
    rollout_return's cap of env.max_turns ends each rollout; its tokens are the actor's."""
    params = ENV.make_params(seed=0)
    bad = jnp.array([99, EOS_ID, PAD_ID], jnp.int32)
    actor = StateActor(init=lambda s: (), act=lambda s, k, c: (
        Choice(response=bad, index=jnp.int32(-1), tokens=jnp.float32(2.5)), c))
    state = _reset(params, 0).replace(turn=jnp.int32(-10))
    mean, rets, tok, calls = jax.jit(
        lambda s, k: mc_return(ENV, params, s, actor, k, M))(state, jax.random.PRNGKey(0))
    assert int(calls) == M * T and float(tok) == M * T * 2.5
    assert np.all(np.asarray(rets) == 0.0) and float(mean) == 0.0


@pytest.mark.parametrize("m", [0, -1])
def test_mc_return_rejects_fewer_than_one_rollout(m):
    params = ENV.make_params(seed=0)
    with pytest.raises(ValueError, match="num_rollouts"):
        mc_return(ENV, params, _reset(params, 0), ENV.policy_fn(params, np.zeros((ENV.num_nodes, K))),
                  jax.random.PRNGKey(0), m)


def test_rekey_needs_a_state_key():
    params = ENV.make_params(seed=0)
    keyless = types.SimpleNamespace(node=jnp.int32(0), done=jnp.array(False))
    with pytest.raises(ValueError, match="key"):
        rollout_return(ENV, params, keyless, lambda s: (jnp.zeros(K), jnp.float32(0)),
                       jax.random.PRNGKey(0), rekey=True)
