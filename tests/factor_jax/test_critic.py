"""TAC's critic (factor_jax.critic) and its Monte-Carlo targets (factor_jax.continuations):
replay bookkeeping, the empty-replay no-op, Polyak, learning, reward coordinates."""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

import factor_jax as fj
from factor_jax import critic as C
from factor_jax.continuations import Continuations, checkpoint_targets, to_reward_coordinate
from tests.helpers.tiers import examples

H, D, W, N = 4, 16, 3, 5


def _state(seed=0):
    return C.init_critic(jax.random.key(seed), H, D, W, N, lr=1e-2)


def test_init_is_orthogonal_small_output_and_target_equals_online():
    s = _state()
    w1 = np.asarray(s.online["w1"])
    np.testing.assert_allclose(w1 @ w1.T, 2.0 * np.eye(H), atol=1e-4)   # gain sqrt 2, H < D
    assert np.abs(np.asarray(s.online["w2"])).max() < 0.05               # gain 0.01
    assert float(s.online["b2"]) == 0.0 and not np.asarray(s.online["b1"]).any()
    for k in s.online:
        np.testing.assert_array_equal(np.asarray(s.online[k]), np.asarray(s.target[k]))
    assert not np.asarray(s.valid).any() and int(s.cursor) == 0


@settings(max_examples=examples(20), deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=6))
def test_replay_keeps_the_last_window_and_counts_add_up(valid_counts):
    """After each push the replay holds min(n_valid, N) of that step's targets in its slot,
    the oldest slot is overwritten first, and the pooled count is the sum over the last W."""
    s = _state()
    kept = []
    for i, n in enumerate(valid_counts):
        valid = jnp.arange(8) < n
        feats = jnp.full((8, H), float(i))
        s = C.push(s, jax.random.key(i), feats, jnp.full((8,), float(i)), valid)
        kept.append(min(n, N))
        slot = i % W
        assert int(np.asarray(s.valid[slot]).sum()) == min(n, N)
        assert np.all(np.asarray(s.targets[slot])[np.asarray(s.valid[slot])] == float(i))
    assert int(np.asarray(s.valid).sum()) == sum(kept[-W:])
    assert int(s.cursor) == len(valid_counts)


def test_empty_replay_takes_no_step():
    s = _state()
    s2, m = C.critic_step(s, jax.random.key(1), lr=1e-2, sample=8, polyak=0.5)
    for a, b in zip(jax.tree.leaves((s.online, s.target, s.opt_state)),
                    jax.tree.leaves((s2.online, s2.target, s2.opt_state))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(m["critic_targets"]) == 0.0


def test_polyak_is_the_convex_combination_and_the_online_head_learns():
    s = _state()
    x = jax.random.normal(jax.random.key(2), (N, H))
    y = jnp.linspace(-1.0, 1.0, N)
    s = C.push(s, jax.random.key(3), x, y, jnp.ones((N,), bool))
    before = C.head_value(s.online, x)
    losses = []
    for i in range(60):
        prev_target = s.target
        s, m = C.critic_step(s, jax.random.key(10 + i), lr=1e-2, sample=8, polyak=0.9)
        losses.append(float(m["critic_loss"]))
        for k in s.target:   # phi_bar = 0.9 phi_bar + 0.1 phi (after the online step)
            np.testing.assert_allclose(np.asarray(s.target[k]),
                                       0.9 * np.asarray(prev_target[k])
                                       + 0.1 * np.asarray(s.online[k]), rtol=1e-5, atol=1e-6)
    assert losses[-1] < 0.1 * losses[0]
    assert float(jnp.mean((C.head_value(s.online, x) - y) ** 2)) < float(
        jnp.mean((before - y) ** 2))


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(st.floats(0.0, 1.0, width=32), min_size=4, max_size=4), st.integers(0, 3))
def test_standardised_outcome_of_an_episode_is_its_a_seq(g, rule_i):
    """An outcome equal to the trajectory's own G lands on its terminal reward in every rule
    (the coordinate the critic's values are read in)."""
    rule = fj.REWARD_RULES[rule_i % len(fj.REWARD_RULES)]
    g = jnp.asarray(g, jnp.float32)
    terminal, _, _ = fj.reward_construction(g, 2, rule)
    y = to_reward_coordinate(jnp.stack([g, g], axis=1), g, 2, rule)
    np.testing.assert_allclose(np.asarray(y), np.asarray(terminal)[:, None] * np.ones((1, 2)),
                               rtol=1e-4, atol=1e-4)


def test_unscored_checkpoints_fall_back_to_the_raw_outcome():
    """The authors' fallback (realized_return = the raw G), also under WebShop's rule.

    One "standardise" group G = (0.2, 0.6): mu 0.4, sigma 0.2, so A_seq = (-1, 1) is the
    terminal reward (the earlier fallback). Slot 0 scored a mean outcome of 0.5 and 0.3:
    targets (0.5 - 0.4) / 0.2 = 0.5 and (0.3 - 0.4) / 0.2 = -0.5; slot 1 none: G = 0.2, 0.6.
    Under "raw" the two coincide: G = (1, 0) -> 0.25 scored, (1, 0) not."""
    def cont(outcome):
        return Continuations(idx=jnp.zeros((2, 2), jnp.int32), valid=jnp.ones((2, 2), bool),
                             outcome=jnp.asarray(outcome),
                             scored=jnp.asarray([[True, False]] * 2),
                             aux_tokens=jnp.float32(0), env_calls=jnp.float32(0))
    t = np.asarray(checkpoint_targets(cont([[0.5, 0.0], [0.3, 0.0]]), jnp.asarray([0.2, 0.6]),
                                      2, "standardise"))
    np.testing.assert_allclose(t, [[0.5, 0.2], [-0.5, 0.6]], rtol=1e-5, atol=1e-6)
    t = np.asarray(checkpoint_targets(cont(jnp.full((2, 2), 0.25)), jnp.asarray([1.0, 0.0]),
                                      2, "raw"))
    np.testing.assert_allclose(t, [[0.25, 1.0], [0.25, 0.0]])


def test_spread_ratio_of_the_target_head():
    mask = jnp.array([[True, True, True, False]])
    online = jnp.array([[0.0, 1.0, 2.0, 9.0]])
    np.testing.assert_allclose(C.spread_ratio(0.25 * online + 3.0, online, mask), 0.25,
                               rtol=1e-6)
    assert float(C.spread_ratio(online, jnp.ones_like(online), mask)) == 0.0


def test_critic_steps_are_that_many_critic_step_calls_in_a_row():
    s = C.push(_state(), jax.random.key(1), jnp.ones((N, H)) * jnp.arange(N)[:, None],
               jnp.arange(N, dtype=jnp.float32), jnp.ones(N, bool))
    one, m1 = C.critic_steps(s, jax.random.key(2), 1e-2, 4, 0.5, steps=1)
    ref, _ = C.critic_step(s, jax.random.key(2), 1e-2, 4, 0.5)
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(a, b)
    three, m3 = C.critic_steps(s, jax.random.key(2), 1e-2, 4, 0.5, steps=3)
    ref = s
    for k in jax.random.split(jax.random.key(2), 3):
        ref, m = C.critic_step(ref, k, 1e-2, 4, 0.5)
    for a, b in zip(jax.tree.leaves(three), jax.tree.leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m3["critic_loss"], m["critic_loss"], rtol=1e-5)
    assert float(m3["critic_loss"]) < float(m1["critic_loss"])
