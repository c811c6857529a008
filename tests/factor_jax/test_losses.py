"""factor_jax.losses (the two-branch policy loss, the forward KL) against the FACTOR
authors' code: their unit tests' hand-worked numbers (re-derived here, in our layout:
tests/helpers/factor_kernels.py), and properties (padding and masked-off garbage change
neither the loss nor its gradient; the KL is >= 0 on its support).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import pad_batch
from tests.helpers.factor_kernels import A, B, PROPS, T, f32, masks as _masks

policy_loss = jax.jit(fj.factor_policy_loss, static_argnames="clip_eps")


# ============================================================ factor_policy_loss

def _ppo_fixture():
    """The authors' two-trajectory case at q = 1, laid out as [B=2, T=2, A=5]:
    episode 0: actions of 2 and 2 tokens with C = (1, 1) and (0.5, 0.5), then 3 non-action
    tokens; episode 1: one 3-token action with C = 0, then 2 non-action tokens.
    ALFWorld group (1, 0) gives A_seq = (1, -1)."""
    act = np.zeros((2, 2, 5), bool)
    non = np.zeros((2, 2, 5), bool)
    coef = np.zeros((2, 2, 5), np.float32)
    act[0, 0, :2] = act[0, 1, :2] = act[1, 0, :3] = True
    non[0, 1, 2:5] = non[1, 0, 3:5] = True
    coef[0, 0, :2], coef[0, 1, :2] = 1.0, 0.5
    _, a_seq, _ = fj.reward_construction(f32([1.0, 0.0]), 2, "leave_one_out")
    return jnp.asarray(act), jnp.asarray(non), f32(coef), a_seq


def test_policy_loss_authors_fixture():
    act, non, coef, a_seq = _ppo_fixture()
    zeros = jnp.zeros(act.shape, jnp.float32)
    out = policy_loss(zeros, zeros, coef, a_seq, act, non, clip_eps=0.2)
    # L_act = -(mean(1, 1) + mean(.5, .5) + mean(0, 0, 0)) / 3 = -0.5
    np.testing.assert_allclose(out["act"], -0.5, rtol=1e-6)
    assert float(out["num_actions"]) == 3
    # L_nonact = -(1 * 3 + (-1) * 2) / 5 = -0.2
    np.testing.assert_allclose(out["nonact"], -0.2, rtol=1e-6)
    assert float(out["num_nonact_tokens"]) == 5
    np.testing.assert_allclose(out["act"] + out["nonact"], -0.7, rtol=1e-6)
    assert float(out["clip_frac"]) == 0.0 and abs(float(out["approx_kl"])) < 1e-7


def test_policy_loss_weighs_actions_equally():
    """A 4-token action with C = 0.25 and a 1-token one with C = 1: -(0.25 + 1) / 2, not
    the token mean -(0.25 * 4 + 1) / 5 = -0.4; no non-action token: L_nonact = 0."""
    act = jnp.zeros((1, 2, 4), bool).at[0, 0].set(True).at[0, 1, 0].set(True)
    coef = jnp.where(act, f32([[[0.25] * 4, [1.0, 0, 0, 0]]]), 0.0)
    zeros = jnp.zeros(act.shape, jnp.float32)
    out = policy_loss(zeros, zeros, coef, f32([1.0]), act, jnp.zeros_like(act), clip_eps=0.2)
    np.testing.assert_allclose(out["act"], -0.625, rtol=1e-6)
    assert float(out["nonact"]) == 0.0
    none = policy_loss(zeros, zeros, coef, f32([1.0]), jnp.zeros_like(act),
                       jnp.zeros_like(act), clip_eps=0.2)
    assert float(none["act"]) == 0.0 and float(none["nonact"]) == 0.0


def test_policy_loss_clipped_hand_case():
    eps = 0.2
    act = jnp.array([[[True, True]]])
    non = jnp.array([[[False, False]]])
    coef = f32([[[2.0, -1.0]]])
    logp_old = f32([[[-1.0, -1.0]]])
    logp = logp_old + f32([[[0.5, -0.5]]])  # q = (e^.5, e^-.5): both clipped here
    out = policy_loss(logp, logp_old, coef, f32([0.0]), act, non, clip_eps=eps)
    expected = -(min(math.exp(0.5) * 2, 1.2 * 2) + min(math.exp(-0.5) * -1, 0.8 * -1)) / 2
    np.testing.assert_allclose(out["act"], expected, rtol=1e-6)
    assert float(out["clip_frac"]) == 1.0


def _loss_batch(rng):
    turn_mask, token_mask = _masks(rng, min_len=1)
    split = rng.random(token_mask.shape) < 0.6
    act = token_mask & split
    non = token_mask & ~split
    logp_old = (-rng.exponential(size=token_mask.shape)).astype(np.float32)
    coef = rng.normal(size=token_mask.shape).astype(np.float32)
    a_seq = rng.normal(size=B).astype(np.float32)
    return turn_mask, token_mask, act, non, logp_old, coef, a_seq


def _total(logp, logp_old, coef, a_seq, act, non, eps=0.2):
    out = fj.factor_policy_loss(logp, logp_old, coef, a_seq, act, non, clip_eps=eps)
    return out["act"] + out["nonact"]


total_grad = jax.jit(jax.grad(_total))


@PROPS
@given(st.integers(0, 2**31 - 1))
def test_policy_loss_at_q_one(seed):
    rng = np.random.default_rng(seed)
    _, _, act, non, logp_old, coef, a_seq = _loss_batch(rng)
    out = policy_loss(f32(logp_old), f32(logp_old), f32(coef), f32(a_seq), jnp.asarray(act),
                      jnp.asarray(non), clip_eps=0.2)
    length = act.sum(-1)
    per_action = np.where(act, coef, 0).sum(-1)[length > 0] / length[length > 0]
    expected = -per_action.mean() if per_action.size else 0.0
    np.testing.assert_allclose(out["act"], expected, rtol=1e-5, atol=1e-6)
    a_tok = np.broadcast_to(a_seq[:, None, None], non.shape)[non]
    np.testing.assert_allclose(out["nonact"], -a_tok.mean() if a_tok.size else 0.0,
                               rtol=1e-5, atol=1e-6)


@PROPS
@given(st.integers(0, 2**31 - 1), st.sampled_from([np.nan, np.inf, -np.inf, None]))
def test_policy_loss_masks_mask(seed, garbage):
    rng = np.random.default_rng(seed)
    turn_mask, token_mask, act, non, logp_old, coef, a_seq = _loss_batch(rng)
    logp = (logp_old + 0.3 * rng.normal(size=logp_old.shape)).astype(np.float32)
    clean = {"logp": np.where(token_mask, logp, 0), "logp_old": np.where(token_mask, logp_old, 0),
             "coef": np.where(act, coef, 0), "turn_mask": turn_mask, "token_mask": token_mask}
    p = pad_batch(clean, 1, 2, rng, garbage=garbage)
    widths = [(0, 0), (0, 1), (0, 2)]
    act_p, non_p = np.pad(act, widths), np.pad(non, widths)
    # Garbage also on the live tokens of the *other* mask: coef off the action tokens.
    coef_p = np.where(non_p, np.float32(1e30), p["coef"])
    # An episode with no non-action token may carry a garbage A_seq.
    a_seq_p = np.where(non.any((1, 2)), a_seq, np.float32(np.nan))
    a_seq_c = np.where(non.any((1, 2)), a_seq, np.float32(0.0))
    args_c = (f32(clean["logp"]), f32(clean["logp_old"]), f32(clean["coef"]), f32(a_seq_c),
              jnp.asarray(act), jnp.asarray(non))
    args_p = (f32(p["logp"]), f32(p["logp_old"]), f32(coef_p), f32(a_seq_p),
              jnp.asarray(act_p), jnp.asarray(non_p))
    out_c = policy_loss(*args_c, clip_eps=0.2)
    out_p = policy_loss(*args_p, clip_eps=0.2)
    for name in out_c:
        np.testing.assert_allclose(out_p[name], out_c[name], rtol=1e-6, atol=1e-7)
    g_c, g_p = np.asarray(total_grad(*args_c)), np.asarray(total_grad(*args_p))
    assert np.all(np.isfinite(g_p))
    np.testing.assert_allclose(g_p[:, :T, :A], g_c, rtol=1e-6, atol=1e-8)
    assert not np.any(g_p[:, T:]) and not np.any(g_p[..., A:])
    assert not np.any(g_p[:, :T, :A][~token_mask])


# ============================================================ forward KL

def _log_softmax(x, axis=-1):
    return jax.nn.log_softmax(f32(x), axis=axis)


def test_forward_kl_full_vocabulary_hand_case():
    """Two-point distributions, logits (2, 0) vs (0, 2): KL = 2 tanh(1) (K = V = 2, one
    position)."""
    t = _log_softmax([[2.0], [0.0]], axis=0)  # [K=2, A=1]
    s = _log_softmax([[0.0], [2.0]], axis=0)
    kl = fj.forward_kl(t, s, jnp.ones((2, 1), bool))
    np.testing.assert_allclose(kl, [2 * math.tanh(1.0)], rtol=1e-6)


def test_forward_kl_identical_and_masked_means():
    rng = np.random.default_rng(0)
    v, n = 11, 5  # vocabulary, positions
    logits = rng.normal(size=(n, v))
    t = _log_softmax(logits).T  # [K=V, A=n]
    kl = fj.forward_kl(t, t, jnp.ones((v, n), bool))
    assert np.max(np.abs(kl)) < 1e-6
    teacher, student = _log_softmax(rng.normal(size=(4, 7))).T, _log_softmax(
        rng.normal(size=(4, 7))).T  # [K=7, A=4]
    kl = fj.forward_kl(teacher, student, jnp.ones((7, 4), bool))
    assert np.all(np.asarray(kl) >= 0)
    mask = jnp.array([[[True, False, True, False]]])  # [B=1, T=1, A=4]
    mean = fj.kl_token_mean(kl[None, None], mask)
    np.testing.assert_allclose(mean, (kl[0] + kl[2]) / 2, rtol=1e-6)
    assert float(fj.kl_token_mean(kl[None, None], jnp.zeros_like(mask))) == 0.0
    # With the kl schedule: L = L_act + L_nonact + lambda_20 * L_kl, lambda_20 = 0.6.
    np.testing.assert_allclose(fj.kl_schedule(20) * mean, 0.6 * (kl[0] + kl[2]) / 2,
                               rtol=1e-6)


def test_forward_kl_constrained_support():
    """Candidates' tokens: position 0 has 3 distinct allowed tokens (4 candidates, one a
    duplicate, masked off), position 1 a single allowed token (forced: KL 0). Garbage off
    the support changes nothing; the teacher gets no gradient."""
    p_t, p_s = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    t = np.full((4, 2), np.nan, np.float32)
    s = np.full((4, 2), np.inf, np.float32)
    t[:3, 0], s[:3, 0] = np.log(p_t), np.log(p_s)
    t[0, 1] = s[0, 1] = 0.0
    mask = np.zeros((4, 2), bool)
    mask[:3, 0] = True
    mask[0, 1] = True
    kl = fj.forward_kl(f32(t), f32(s), jnp.asarray(mask))
    np.testing.assert_allclose(kl, [np.sum(p_t * np.log(p_t / p_s)), 0.0], rtol=1e-6)
    g_t, g_s = jax.grad(lambda a, b: jnp.sum(fj.forward_kl(a, b, jnp.asarray(mask))),
                        argnums=(0, 1))(f32(t), f32(s))
    np.testing.assert_array_equal(g_t, 0.0)
    g_s = np.asarray(g_s)
    assert np.all(np.isfinite(g_s)) and not np.any(g_s[~mask])
    np.testing.assert_allclose(g_s[:3, 0], -p_t, rtol=1e-6)  # d/d log p_S = -p_T


@PROPS
@given(st.integers(0, 2**31 - 1))
def test_forward_kl_nonnegative_on_support(seed):
    rng = np.random.default_rng(seed)
    k = 5
    mask = rng.random((B, T, k, A)) < 0.6
    mask[..., 0, :] = True
    logits_t, logits_s = rng.normal(size=(2, B, T, k, A)) * 3

    def renorm(x):
        x = np.where(mask, x, -np.inf)
        return np.asarray(jax.nn.log_softmax(f32(x), axis=-2))

    kl = np.asarray(jax.jit(fj.forward_kl)(f32(renorm(logits_t)), f32(renorm(logits_s)),
                                           jnp.asarray(mask)))
    assert kl.shape == (B, T, A) and np.all(np.isfinite(kl)) and np.all(kl >= -1e-6)
    single = mask.sum(-2) == 1
    np.testing.assert_allclose(kl[single], 0.0, atol=1e-6)
