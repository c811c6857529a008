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



def test_teacher_prompt_in_the_word_vocabulary():
    """The tiny actor's teacher reads SERL's text in its words: lower case, every newline a
    SEP; the instruction's new words come after every environment word (ids unchanged)."""
    import types

    from asct_jax.envs import tokenizer as wt
    from asct_jax.envs.prompt import PromptTokens
    from asct_jax.envs.text_interface import render_text
    from factor_jax.teacher import teacher_prefix
    tok = wt.get_tokenizer()
    obs = jnp.asarray([wt.encode_fixed("you see a mug", 6)])
    fb = jnp.asarray([wt.encode_fixed("mug is clean", 4)])
    policy = types.SimpleNamespace(prompt=PromptTokens(), pad_id=0)
    words = lambda x: tok.convert_ids_to_tokens([int(i) for i in x[0] if i != 0])  # noqa: E731
    serl = words(teacher_prefix(policy, obs, fb))
    assert render_text(serl) == ("you see a mug\n\nimmediate feedback from the current step:\n"
                                 "mug is clean\n\ncorrectly solve the current task.\n")
    assert serl[4:6] == ["<sep>", "<sep>"] and serl[-1] == "<sep>"
    assert words(teacher_prefix(policy, obs, fb, "appended")) == (
        ["you", "see", "a", "mug", "<sep>", "mug", "is", "clean"])
    vocab = wt.vocabulary()
    n_env = len(set(wt._word_source()) - set(wt.SPECIAL_TOKENS)) + len(wt.SPECIAL_TOKENS)
    assert vocab[5:n_env] == sorted(vocab[5:n_env]) and vocab[:5] == list(wt.SPECIAL_TOKENS)
    assert {"immediate", "correctly", "solve"} <= set(vocab[n_env:])
