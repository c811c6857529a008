"""factor_jax.continuations on a small ToyTree (3 actions, depth 5), against outcomes
worked out by walking the tree in NumPy:

- run_continuations: a batch of 6 episodes of 1 to 5 turns played by a uniform chooser,
  continued by a deterministic table policy, whose continuation from a checkpoint is one
  known path. The checkpoints lie inside each episode (two from 4 turns, one from 2, none
  for a 1-turn episode, whose padded turns give nothing); a continuation's outcome is the
  return before the checkpoint plus the path's ("return") or the final score ("score",
  the environment's info field); one that does not end within the horizon is not
  scored; aux_tokens and env_calls are the M continuations' costs and steps at the valid
  checkpoints only; a fixed key gives the same Continuations, another key other
  checkpoints.
- continuation_outcomes: the mean over the continuations that ended only (0 and not
  scored when none did), prefix_return added under "return".
- to_reward_coordinate / outcome_targets: each group's own standardisation (0 for a
  constant group), the identity under the other rules, the raw G where nothing scored.

(The outcome equal to G landing on A_seq and checkpoint_targets' worked example are in
test_critic.py; checkpoint_turns' distribution in test_checkpoints.py; play_from in
tests/asct_jax/envs/test_play.py.)"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.envs import play as P
from asct_jax.envs.toy_tree import ToyTree
from asct_jax.rl.rollout import episodes_to_rollout
from factor_jax.continuations import (continuation_outcomes, outcome_targets,
                                      run_continuations, to_reward_coordinate)

ENV = ToyTree(num_actions=3, depth=5)
PARAMS = ENV.make_params(seed=0, early_stop_prob=0.3)
M = 3
# A table policy with logit gaps of 1000: a ~ pi_old is the legal argmax, always.
LOGITS = 1000.0 * np.stack([np.random.default_rng(n).permutation(ENV.num_actions)
                            for n in range(ENV.num_nodes)]).astype(np.float32)
POLICY = ENV.policy_fn(PARAMS, LOGITS)


def _path(node, horizon):
    """(return, steps, tokens, ended) of the policy's path from `node`, <= horizon turns."""
    legal, term = np.asarray(PARAMS.legal), np.asarray(PARAMS.terminates)
    rew, cost = np.asarray(PARAMS.rewards, np.float64), np.asarray(PARAMS.costs)
    ret = tokens = 0.0
    for step in range(1, horizon + 1):
        a = int(np.argmax(np.where(legal[node], LOGITS[node], -np.inf)))
        ret, tokens = ret + rew[node, a], tokens + cost[a]
        if term[node, a]:
            return ret, step, tokens, True
        node = node * ENV.num_actions + a + 1
    return ret, horizon, tokens, False


@pytest.fixture(scope="module")
def batch():
    eps = jax.jit(lambda k: P.play(ENV, PARAMS, P.uniform_chooser, k, 3, 2))(jax.random.key(1))
    b = episodes_to_rollout(eps)
    n = np.asarray(b.turn_mask).sum(1)
    assert {1, 2, 3, 4} <= set(n.tolist()) and n.max() == ENV.max_turns   # every case
    return b


@functools.partial(jax.jit, static_argnums=(2, 3))
def _run(batch, key, horizon, outcome_key):
    return run_continuations(ENV, PARAMS, batch, POLICY, key, M, horizon, outcome_key)


def _continue(batch, key, horizon, outcome_key):
    return _run(batch, jax.random.key(key), horizon, outcome_key)


def _expected(batch, cont, horizon):
    """(outcome, scored, tokens, calls) worked out from the paths, the invalid slots empty."""
    idx, valid = np.asarray(cont.idx), np.asarray(cont.valid)
    rewards = np.asarray(batch.rewards, np.float64)
    nodes = np.asarray(batch.states.node)
    outcome, scored = np.zeros(idx.shape), np.zeros(idx.shape, bool)
    tokens = calls = 0.0
    for i, s in zip(*np.nonzero(valid)):
        t = idx[i, s]
        ret, steps, tok, ended = _path(nodes[i, t], horizon)
        g = rewards[i, :t].sum() + ret
        tokens, calls = tokens + M * tok, calls + M * steps
        scored[i, s] = ended
        if ended:
            outcome[i, s] = g     # "return": before + path; "score": ToyTree's final return
    return outcome, scored, tokens, calls


@pytest.mark.parametrize("horizon, outcome_key", [(ENV.max_turns, "return"), (1, "score")])
def test_continuations_score_the_policys_path_from_each_checkpoint(batch, horizon,
                                                                   outcome_key):
    cont = _continue(batch, 0, horizon, outcome_key)
    n = np.asarray(batch.turn_mask).sum(1)
    idx, valid = np.asarray(cont.idx), np.asarray(cont.valid)
    np.testing.assert_array_equal(valid, np.stack([n > 1, n >= 4], axis=1))
    assert np.all(idx[valid] < np.repeat(n[:, None], 2, axis=1)[valid])   # inside the episode
    outcome, scored, tokens, calls = _expected(batch, cont, horizon)
    np.testing.assert_array_equal(np.asarray(cont.scored), scored)
    np.testing.assert_allclose(np.asarray(cont.outcome), outcome, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose([float(cont.aux_tokens), float(cont.env_calls)],
                               [tokens, calls], rtol=1e-6)
    if horizon == 1:        # one turn from a live state: only last-turn checkpoints end
        assert scored.any() and (valid & ~scored).any() and calls == M * valid.sum()
    else:
        np.testing.assert_array_equal(scored, valid)


def test_a_fixed_key_gives_the_same_continuations_and_another_key_others(batch):
    one = _continue(batch, 0, ENV.max_turns, "return")
    again = _continue(batch, 0, ENV.max_turns, "return")
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(again)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    others = [_continue(batch, k, ENV.max_turns, "return") for k in (1, 2, 3)]
    assert any(np.any(np.asarray(o.idx) != np.asarray(one.idx)) for o in others)


# At the root, action 0 ends the episode with reward 0.7, action 1 leads to node 2 where
# nothing is legal (a turn there does nothing), action 2 is illegal; every action costs 2.
ROOT = PARAMS.replace(
    legal=PARAMS.legal.at[0].set(jnp.array([True, True, False])).at[2].set(False),
    terminates=PARAMS.terminates.at[0].set(jnp.array([True, False, False])),
    rewards=PARAMS.rewards.at[0, 0].set(0.7), costs=jnp.full((3,), 2.0))


@jax.jit
def _from_root(logits, state, key):
    """16 continuations of at most 2 turns of the table policy `logits`, prefix 0.25."""
    return continuation_outcomes(ENV, ROOT, state, ENV.policy_fn(ROOT, logits), key, 16, 2,
                                 "return", 0.25)


@pytest.mark.parametrize("logits0, ends", [((0.0, 0.0, 0.0), True), ((0.0, 1e3, 0.0), False)])
def test_the_mean_outcome_is_over_the_continuations_that_ended(logits0, ends):
    """16 continuations of 2 turns from the root, prefix_return 0.25. A uniform policy:
    those that took action 0 end (outcome 0.25 + 0.7), those that took action 1 do not
    (two steps each), so the mean is 0.95 however many did. A policy on action 1: none
    ends, the mean is 0 and nothing is scored."""
    logits = jnp.zeros((ENV.num_nodes, 3)).at[0].set(jnp.asarray(logits0))
    state, _ = ENV.reset(jax.random.key(0), ROOT)
    mean, ended, tokens, calls = _from_root(logits, state, jax.random.key(3))
    assert bool(ended) == ends and float(tokens) == 2.0 * float(calls)
    if ends:
        assert 16 < int(calls) < 32           # some took 1 turn (ended), some 2 (did not)
        np.testing.assert_allclose(float(mean), 0.95, rtol=1e-6)
    else:
        assert int(calls) == 32 and float(mean) == 0.0


RULES = ("leave_one_out", "standardise", "raw")
G = 3   # group size


@given(st.lists(st.integers(-4, 4).map(lambda i: i / 2), min_size=2 * G, max_size=2 * G),
       st.lists(st.floats(-2, 2, width=32), min_size=4 * G, max_size=4 * G),
       st.lists(st.booleans(), min_size=4 * G, max_size=4 * G), st.sampled_from(RULES))
def test_targets_are_each_groups_coordinate_or_the_raw_g(g, outcome, scored, rule):
    """Two groups of 3 trajectories, the second with a constant G (sigma = 0); G in
    halves, so the first group's sigma is 0 or >= 0.2."""
    returns = np.asarray(g[:G] + [g[G]] * G, np.float32)
    outcome = np.asarray(outcome, np.float32).reshape(2 * G, 2)
    scored = np.asarray(scored).reshape(2 * G, 2)
    y = np.asarray(to_reward_coordinate(jnp.asarray(outcome), jnp.asarray(returns), G, rule))
    assert y.dtype == np.float32
    if rule == "standardise":
        first = returns[:G].astype(np.float64)
        mu, sigma = first.mean(), first.std()
        want = np.concatenate([(outcome[:G] - mu) / (sigma + 1e-8) if sigma >= 1e-6
                               else np.zeros((G, 2)), np.zeros((G, 2))])
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(y, outcome)
    t = np.asarray(outcome_targets(jnp.asarray(outcome), jnp.asarray(scored),
                                   jnp.asarray(returns), G, rule))
    np.testing.assert_array_equal(t, np.where(scored, y, returns[:, None]))
