"""SERL coefficients and its lambda schedule, against hand computations."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import pad_batch, random_batch

B, T, A = 3, 5, 6
serl = jax.jit(fj.serl_coefficients)


def test_hand_case():
    adv = jnp.array([1.5, -2.0])
    delta = jnp.array([[[0.1, 0.5, -0.5, 30.0]], [[0.1, 0.5, -0.5, 30.0]]])
    mask = jnp.array([[[True, True, True, False]], [[True, True, True, True]]])
    lam = 0.3
    # Episode 0 (A > 0): w = clip(e^{delta}) = (e^0.1, 1.2, 0.8); padding -> 0.
    # Episode 1 (A < 0): w = clip(e^{-delta}) = (e^-0.1, 0.8, 1.2, clip(e^-20) = 0.8).
    w0 = [math.exp(0.1), 1.2, 0.8]
    w1 = [math.exp(-0.1), 0.8, 1.2, 0.8]
    expected = np.array([[[1.5 * (0.7 + 0.3 * w) for w in w0] + [0.0]],
                         [[-2.0 * (0.7 + 0.3 * w) for w in w1]]])
    np.testing.assert_allclose(serl(adv, delta, mask, mask, lam), expected, rtol=1e-6)
    # The multiplier (1 - lam) + lam w on action tokens, exactly 1 elsewhere (padding too).
    np.testing.assert_allclose(fj.serl_token_weights(delta, adv, mask, lam)[1, 0],
                               [0.7 + 0.3 * w for w in w1], rtol=1e-6)
    assert float(fj.serl_token_weights(delta, adv, mask, lam)[0, 0, 3]) == 1.0
    # Reasoning tokens (in token_mask, not in action_mask) keep A.
    reasoning = mask.at[0, 0, 2].set(False)
    np.testing.assert_allclose(serl(adv, delta, reasoning, mask, lam)[0, 0, 2], 1.5)
    # lam = 0 is plain GRPO on every token; no renormalisation to mean 1 otherwise.
    np.testing.assert_allclose(serl(adv, delta, mask, mask, 0.0),
                               np.where(mask, adv[:, None, None], 0.0))


def test_per_turn_advantages_weigh_each_turn_by_its_own_sign():
    # SERL's GRPO over step samples gives one A per turn: an invalid step's score can fall
    # below the group mean while its episode's other turns stay above it. One episode,
    # two turns of one action token each, delta = 0.5, lam = 0.5, A = (0.4, -0.1):
    # turn 0: w = clip(e^0.5) = 1.2 -> 0.4 (0.5 + 0.6) = 0.44;
    # turn 1: w = clip(e^-0.5) = 0.8 -> -0.1 (0.5 + 0.4) = -0.09.
    adv = jnp.array([[0.4, -0.1]])
    delta = jnp.full((1, 2, 1), 0.5)
    mask = jnp.ones((1, 2, 1), bool)
    np.testing.assert_allclose(serl(adv, delta, mask, mask, 0.5), [[[0.44], [-0.09]]],
                               rtol=1e-6)


@given(st.integers(0, 2**31 - 1), st.floats(0.0, 1.0))
def test_episode_advantages_are_per_turn_ones_broadcast(seed, lam):
    """A [B] advantage is the same as that advantage on every turn ([B, T])."""
    rng = np.random.default_rng(seed)
    b = random_batch(rng, B, T, A, scale=10.0)
    delta = b["teacher_logp"] - b["student_logp"]
    adv = rng.normal(size=(B,)).astype(np.float32)
    np.testing.assert_array_equal(
        serl(adv, delta, b["token_mask"], b["token_mask"], lam),
        serl(np.repeat(adv[:, None], T, 1), delta, b["token_mask"], b["token_mask"], lam))


@given(st.integers(0, 2**31 - 1), st.floats(0.0, 1.0))
def test_padding_and_bounds(seed, lam):
    rng = np.random.default_rng(seed)
    b = random_batch(rng, B, T, A, scale=10.0)
    delta = b["teacher_logp"] - b["student_logp"]
    adv = rng.normal(size=(B,)).astype(np.float32)
    p = pad_batch({"delta": delta, "turn_mask": b["turn_mask"], "token_mask": b["token_mask"]},
                  2, 3, rng, garbage=np.nan)
    c = np.asarray(serl(adv, delta, b["token_mask"], b["token_mask"], lam))
    c_p = np.asarray(serl(adv, p["delta"], p["token_mask"], p["token_mask"], lam))
    np.testing.assert_array_equal(c_p[:, :T, :A], c)
    assert not np.any(c_p[:, T:]) and not np.any(c_p[..., A:])
    ratio = (c / adv[:, None, None])[b["token_mask"]]
    assert np.all(ratio >= 1 - 0.2 * lam - 1e-6) and np.all(ratio <= 1 + 0.2 * lam + 1e-6)


def test_lambda_schedule():
    # SERL: lam_k = lam0 * max(0, 1 - (k - 1) / decay), k 1-indexed (lam0 at k = 1).
    for step, lam in [(1, 0.5), (11, 0.4), (26, 0.25), (51, 0.0), (80, 0.0)]:
        np.testing.assert_allclose(fj.serl_lambda(step), lam, atol=1e-7)
    np.testing.assert_allclose(jax.jit(fj.serl_lambda)(jnp.int32(26)), 0.25)
    np.testing.assert_allclose(fj.serl_lambda(6, lam0=1.0, decay_steps=10), 0.5)
    np.testing.assert_allclose(fj.serl_lambda(30, decay_steps=0), 0.5)  # SERL: no decay


@pytest.mark.parametrize("call, field", [
    (lambda: fj.serl_lambda(1, lam0=1.5), "lam0"),
    (lambda: fj.serl_lambda(1, decay_steps=-1), "decay_steps"),
    (lambda: fj.serl_coefficients(jnp.ones(1), jnp.ones((1, 1, 1)), jnp.ones((1, 1, 1), bool),
                                  jnp.ones((1, 1, 1), bool), lam=2.0), "lam"),
    (lambda: fj.serl_token_weights(jnp.ones((1, 1, 1)), jnp.ones(1), jnp.ones((1, 1, 1), bool),
                                   0.5, clip=-0.1), "clip"),
])
def test_bad_config_raises(call, field):
    with pytest.raises(ValueError, match=field):
        call()
