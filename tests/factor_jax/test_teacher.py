"""factor_jax/teacher.py: the hindsight teacher on a rollout batch of the tiny test model
(household, 2 x 2 episodes). teacher_log_probs / teacher_outputs are the policy's passes
over teacher_prefix of each turn's x_t and o_{t+1} ([B, T, ...], 0 on padding; the token
log-probs are the distribution's entries at the taken candidate; the prompt name changes
the prefix read), and kl_reduce is KL(pi_T || pi_theta) of the pass's distribution to
loss_inputs[TEACHER_DIST] (direction, NumPy reference with a support mask, >= 0, 0 at
equal distributions). (FACTOR's loss on it: tests/asct_jax/rl/test_credit_methods.py; the
chunked pass: tests/asct_jax/rl/test_generation.py; forward_kl itself:
tests/factor_jax/test_losses.py.)"""
import types

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

from asct_jax.rl.types import merge_batch_turns as flat
from experiments.configs import base
from factor_jax import teacher as ft


@pytest.fixture(scope="module")
def setup(credit_setup):
    c = base.use_test_model(base.get_config())
    c.env.name = "household"
    _, ctx, params, batch = credit_setup(c)      # conftest: 2 x 2 episodes, fresh policy
    return ctx, params, batch


def test_teacher_log_probs_are_the_policys_on_the_teacher_prefix(setup):
    ctx, params, batch = setup
    pol = ctx.policy
    b, t, a = batch.responses.shape
    got = {p: np.asarray(jax.jit(lambda q, x, p=p: ft.teacher_log_probs(ctx, q, x, p))(
        params, batch)) for p in ft.TEACHER_PROMPTS}
    mask = np.asarray(batch.token_mask)
    assert mask.any() and (~mask).any()
    for p, logp in got.items():
        assert logp.shape == (b, t, a)
        prefix = ft.teacher_prefix(pol, flat(batch.obs), flat(batch.feedback), p)
        want = np.asarray(pol.token_log_probs(params, prefix, flat(batch.responses),
                                              flat(batch.cand_tokens),
                                              flat(batch.cand_mask))).reshape(b, t, a)
        np.testing.assert_array_equal(logp[~mask], 0.0)               # 0 on padding
        np.testing.assert_allclose(logp[mask], want[mask], rtol=1e-5, atol=1e-6)
        assert (logp[mask] <= 1e-6).all()
    assert not np.allclose(got["serl"][mask], got["appended"][mask])    # the prompt matters
    student = np.asarray(batch.logp_old)
    assert not np.allclose(got["serl"][mask], student[mask])            # the feedback read


def test_teacher_outputs_layout_and_its_token_log_probs(setup):
    ctx, params, batch = setup
    b, t, k, a = batch.cand_tokens.shape
    logp, dist, support = (np.asarray(x) for x in jax.jit(
        lambda q, x: ft.teacher_outputs(ctx, q, x))(params, batch))
    assert dist.shape == support.shape == (b, t, k, a) and support.dtype == bool
    mask = np.asarray(batch.token_mask)
    np.testing.assert_array_equal(logp[~mask], 0.0)
    want = np.asarray(jax.jit(lambda q, x: ft.teacher_log_probs(ctx, q, x))(params, batch))
    np.testing.assert_allclose(logp, want, rtol=1e-5, atol=1e-6)
    # the taken candidate's entries of the distribution (where they are its token's
    # support entry, not a duplicate of another candidate's) are its token log-probs
    idx = np.maximum(np.asarray(batch.action_index), 0)[:, :, None, None]
    live = np.asarray(batch.turn_mask) & (np.asarray(batch.action_index) >= 0)
    taken = np.take_along_axis(dist, idx, 2)[:, :, 0]
    ok = mask & live[:, :, None] & np.take_along_axis(support, idx, 2)[:, :, 0]
    assert ok.sum() >= 8
    np.testing.assert_allclose(taken[ok], logp[ok], rtol=1e-5, atol=1e-6)
    # a distribution on its support at every live position
    tot = np.sum(np.where(support, np.exp(dist), 0.0), axis=2)           # [B, T, A]
    on = mask & live[:, :, None]
    np.testing.assert_allclose(tot[on], 1.0, rtol=1e-5)


def test_kl_reduce_is_the_forward_kl_from_the_teacher_hand_case():
    """p_T = (0.5, 0.5), p_theta = (0.9, 0.1): KL(T||theta) = 0.5 log(0.25 / 0.09) ~ 0.511,
    not KL(theta||T) ~ 0.368; inputs is loss_inputs[TEACHER_DIST]."""
    t = jnp.log(jnp.asarray([[0.5], [0.5]], jnp.float32))     # [K = 2, A = 1]
    s = jnp.log(jnp.asarray([[0.9], [0.1]], jnp.float32))
    kl = ft.kl_reduce.fn(s, jnp.ones((2, 1), bool), t)
    np.testing.assert_allclose(kl, [0.5 * np.log(0.25 / 0.09)], rtol=1e-5)
    credit = types.SimpleNamespace(loss_inputs={ft.TEACHER_DIST: t, "other": s})
    assert ft.kl_reduce.inputs(credit) is t
    assert ft.TEACHER_DIST == "teacher_dist"


@given(st.integers(0, 2**31 - 1))
def test_kl_reduce_matches_numpy_on_the_support_and_is_zero_at_equal(seed):
    r = np.random.default_rng(seed)
    k, a = 5, 4
    support = r.random((k, a)) < 0.6
    support[0] = True                                     # every position has a token

    def dist():
        logits = np.where(support, r.normal(size=(k, a)) * 2, -np.inf)
        logp = logits - np.log(np.sum(np.exp(logits), 0, keepdims=True))
        return np.where(support, logp, r.normal(size=(k, a)) * 50)      # garbage off it

    t, s = dist(), dist()
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    kl = np.asarray(ft.kl_reduce.fn(f(s), jnp.asarray(support), f(t)))
    pt = np.where(support, np.exp(t), 0.0)
    want = np.sum(np.where(support, pt * (t - s), 0.0), axis=0)
    np.testing.assert_allclose(kl, want, rtol=1e-4, atol=1e-5)
    assert (kl >= -1e-6).all()
    same = np.asarray(ft.kl_reduce.fn(f(t), jnp.asarray(support), f(t)))
    np.testing.assert_allclose(same, 0.0, atol=1e-6)
