"""HTA: the hindsight delta and sign-aware scores."""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import pad_batch, random_batch

B, T, A = 3, 5, 6
hta = jax.jit(fj.hta_scores, static_argnames="return_delta")


def test_hand_case():
    teacher = jnp.array([[[-0.1, -2.0, -9.0], [-1.0, -1.0, -1.0], [-3.0, -0.5, -7.0]]])
    student = jnp.array([[[-0.5, -1.0, -5.0], [-2.0, -2.0, -2.0], [-1.0, -1.0, -7.0]]])
    credit = jnp.array([[2.0, 0.0, -0.5]])
    mask = jnp.array([[[True, True, False], [True, False, False], [True, True, False]]])
    scores, delta = hta(teacher, student, credit, mask, return_delta=True)
    np.testing.assert_allclose(delta, [[[0.4, -1.0, 0.0], [1.0, 0.0, 0.0], [-2.0, 0.5, 0.0]]],
                               atol=1e-6)
    # s = sign(A*) * delta: positive credit keeps it, zero credit zeroes it, blame flips it.
    np.testing.assert_allclose(scores, [[[0.4, -1.0, 0.0], [0.0, 0.0, 0.0], [2.0, -0.5, 0.0]]],
                               atol=1e-6)
    np.testing.assert_allclose(hta(teacher, student, credit, mask), scores)


@given(st.integers(0, 2**31 - 1))
def test_padding_never_changes_the_result(seed):
    rng = np.random.default_rng(seed)
    b = random_batch(rng, B, T, A)
    credit = rng.normal(size=(B, T)).astype(np.float32)
    p = pad_batch(dict(b, credit=credit), 2, 3, rng, garbage=np.nan)
    s, d = hta(b["teacher_logp"], b["student_logp"], credit, b["token_mask"], return_delta=True)
    sp, dp = hta(p["teacher_logp"], p["student_logp"], p["credit"], p["token_mask"],
                 return_delta=True)
    np.testing.assert_array_equal(sp[:, :T, :A], s)
    np.testing.assert_array_equal(dp[:, :T, :A], d)
    assert not np.any(sp[:, T:]) and not np.any(sp[..., A:]) and np.all(np.isfinite(sp))


def test_scores_are_constants():
    rng = np.random.default_rng(0)
    b = random_batch(rng, B, T, A)
    credit = jnp.asarray(rng.normal(size=(B, T)), jnp.float32)
    g = jax.grad(lambda t: jnp.sum(fj.hta_scores(t, b["student_logp"], credit,
                                                 b["token_mask"])))(b["teacher_logp"])
    np.testing.assert_array_equal(g, 0.0)


# ------------------------------------------------------------------ choice tokens

def _choice_reference(actions, cands, legal, token_mask):
    """Brute force: token j is a choice iff the legal candidates sharing y_<j have more
    than one distinct token at j."""
    out = np.zeros(token_mask.shape, bool)
    for idx in np.ndindex(token_mask.shape[:-1]):
        y = actions[idx]
        for j in range(y.shape[0]):
            nxt = {int(c[j]) for c, ok in zip(cands[idx], legal[idx])
                   if ok and np.array_equal(c[:j], y[:j])}
            out[idx + (j,)] = token_mask[idx + (j,)] and len(nxt) > 1
    return out


def test_choice_tokens_hand_case():
    # Candidates (EOS = 1, PAD = 0): "5 7", "5 8", "6", "5 7 9" (illegal).
    cands = jnp.array([[[5, 7, 1, 0], [5, 8, 1, 0], [6, 1, 0, 0], [5, 7, 9, 1]]])
    legal = jnp.array([[True, True, True, False]])
    act = cands[:, 0]
    mask = act != 0
    # 5: vs 6 (a choice); 7: vs 8 (a choice); EOS: "5 7 9" is illegal (forced).
    np.testing.assert_array_equal(fj.choice_tokens(act, cands, legal, mask),
                                  [[True, True, False, False]])
    legal = legal.at[0, 3].set(True)   # now EOS vs 9 is a choice too
    np.testing.assert_array_equal(fj.choice_tokens(act, cands, legal, mask),
                                  [[True, True, True, False]])
    only = jnp.array([[True, False, False, False]])   # a single legal candidate
    assert not np.any(fj.choice_tokens(act, cands, only, mask))
    masked = mask.at[0, 1].set(False)   # never outside token_mask
    assert not fj.choice_tokens(act, cands, legal, masked)[0, 1]


@given(st.integers(0, 2**31 - 1))
def test_choice_tokens_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, k, a = 6, 5, 4
    cands = rng.integers(2, 5, size=(n, k, a)).astype(np.int32)   # small vocab: shared prefixes
    lens = rng.integers(1, a + 1, size=(n, k))
    cands = np.where(np.arange(a) < lens[..., None], cands, 0)
    legal = rng.random((n, k)) < 0.7
    legal[:, 0] = True
    act = cands[:, 0]
    mask = act != 0
    got = np.asarray(jax.jit(fj.choice_tokens)(act, cands, legal, mask))
    np.testing.assert_array_equal(got, _choice_reference(act, cands, legal, mask))


def test_forced_tokens_do_not_take_credit():
    """A teacher less sure of the one choice token than the student (delta < 0 there,
    0 on the forced tokens): over all tokens APM moves positive credit off the choice and
    blame onto it; over the choice tokens the choice carries exactly A."""
    mask = jnp.ones((1, 2, 3), bool)
    choice = jnp.array([[[True, False, False], [True, False, False]]])
    student = jnp.array([[[-0.2, 0.0, 0.0], [-0.2, 0.0, 0.0]]])
    teacher = student - jnp.array([[[1.5, 0.0, 0.0], [1.5, 0.0, 0.0]]])
    credit = jnp.array([[1.0, -1.0]])
    coef_all, _ = fj.hindsight_allocation(credit, teacher, student, mask, fj.apm_weights)
    coef_choice, _ = fj.hindsight_allocation(credit, teacher, student, choice,
                                             fj.apm_weights)
    np.testing.assert_allclose(coef_choice, [[[1.0, 0, 0], [-1.0, 0, 0]]], atol=1e-6)
    on_choice = np.asarray(coef_all)[0, :, 0]
    assert 0 < on_choice[0] < 1.0 and on_choice[1] < -1.0   # shrunk / amplified
    assert on_choice.sum() < 0   # net push against the sampled choices
