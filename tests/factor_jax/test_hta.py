"""HTA: the hindsight delta and the sign-aware clipped scores."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import pad_batch, random_batch

B, T, A = 3, 5, 6


@jax.jit
def hta(teacher, student, credit, mask):
    delta = fj.hindsight_delta(teacher, student, mask)
    return fj.hta_scores(delta, credit, mask, 3.0), delta


def test_hand_case():
    teacher = jnp.array([[[-0.1, -2.0, -9.0], [-1.0, -1.0, -1.0], [-3.0, -0.5, -7.0]]])
    student = jnp.array([[[-0.5, -1.0, -5.0], [-2.0, -2.0, -2.0], [-1.0, -5.0, -7.0]]])
    credit = jnp.array([[2.0, 0.0, -0.5]])
    mask = jnp.array([[[True, True, False], [True, False, False], [True, True, False]]])
    scores, delta = hta(teacher, student, credit, mask)
    np.testing.assert_allclose(delta, [[[0.4, -1.0, 0.0], [1.0, 0.0, 0.0], [-2.0, 4.5, 0.0]]],
                               atol=1e-6)
    # s = sign(A*) clip(delta, -3, 3): positive credit keeps it, zero credit zeroes it,
    # blame flips it.
    np.testing.assert_allclose(scores, [[[0.4, -1.0, 0.0], [0.0, 0.0, 0.0], [2.0, -3.0, 0.0]]],
                               atol=1e-6)


@given(st.integers(0, 2**31 - 1))
def test_padding_never_changes_the_result(seed):
    rng = np.random.default_rng(seed)
    b = random_batch(rng, B, T, A)
    credit = rng.normal(size=(B, T)).astype(np.float32)
    p = pad_batch(dict(b, credit=credit), 2, 3, rng, garbage=np.nan)
    s, d = hta(b["teacher_logp"], b["student_logp"], credit, b["token_mask"])
    sp, dp = hta(p["teacher_logp"], p["student_logp"], p["credit"], p["token_mask"])
    np.testing.assert_array_equal(sp[:, :T, :A], s)
    np.testing.assert_array_equal(dp[:, :T, :A], d)
    assert not np.any(sp[:, T:]) and not np.any(sp[..., A:]) and np.all(np.isfinite(sp))


def test_scores_are_constants():
    rng = np.random.default_rng(0)
    b = random_batch(rng, B, T, A)
    credit = jnp.asarray(rng.normal(size=(B, T)), jnp.float32)
    g = jax.grad(lambda t: jnp.sum(hta(t, b["student_logp"], credit, b["token_mask"])[0]))(
        b["teacher_logp"])
    np.testing.assert_array_equal(g, 0.0)


def test_bad_clip_raises_naming_the_field():
    x, m = jnp.zeros((1, 1, 2)), jnp.ones((1, 1, 2), bool)
    with pytest.raises(ValueError, match="clip_d"):
        fj.hta_scores(x, jnp.zeros((1, 1)), m, clip_d=0.0)
