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


# ------------------------------------------------ SERL's recipe (issue 36), hand-worked
def _serl_config(**kw):
    from factor_jax.baselines import SerlConfig
    base = dict(lam0=0.5, decay_steps=50, resync_every=10, clip=0.2, train_steps=20)
    return SerlConfig(**{**base, **kw})


def test_schedules_are_serls_unscaled_by_default():
    """SERL's code: lambda decays over 50 steps and the teacher re-syncs every 10, whatever
    the run's length. At train.steps = 20: lam_1 = 0.5, lam_26 = 0.5 (1 - 25/50) = 0.25,
    lam_51 = 0; re-sync after steps 10, 20, ... (0-based step 9, 19)."""
    import ml_collections

    from factor_jax.baselines import _serl_update, serl_config, serl_schedules
    c = ml_collections.ConfigDict({"train": {"steps": 20}, "serl": {
        "lam0": 0.5, "decay_steps": 50, "resync_every": 10, "clip": 0.2}})
    sc = serl_config(c)
    assert sc.scale_schedules is False and sc.teacher_prompt == "serl"
    decay, every = serl_schedules(sc)
    assert (decay, every) == (50, 10)
    for k, lam in [(1, 0.5), (26, 0.25), (51, 0.0)]:
        np.testing.assert_allclose(fj.serl_lambda(k, sc.lam0, decay), lam, atol=1e-7)
    old, new = {"w": jnp.zeros(2)}, {"w": jnp.ones(2)}
    synced = [float(_serl_update(sc, None, {"teacher": old}, _Inputs(new, s))[0]["teacher"]["w"][0])
              for s in range(20)]
    assert synced == [1.0 if s in (9, 19) else 0.0 for s in range(20)]
    # The named option scales them to train.steps (given for 150 steps): decay
    # round(50 * 20 / 150) = 7, re-sync round(10 * 20 / 150) = 1 (every step).
    assert serl_schedules(_serl_config(scale_schedules=True)) == (7, 1)


class _Inputs:
    def __init__(self, params, step):
        self.params, self.step = params, jnp.int32(step)


def test_prompted_rows_hand_case():
    """SERL's serl_mask: a real turn whose feedback has a non-PAD token."""
    feedback = jnp.array([[[5, 0], [0, 0], [7, 8]], [[0, 9], [3, 3], [0, 0]]])
    turn_mask = jnp.array([[True, True, False], [True, True, True]])
    np.testing.assert_array_equal(fj.serl_prompted_rows(feedback, turn_mask, 0),
                                  [[True, False, False], [True, True, False]])


def test_policy_loss_uses_the_current_policy_and_the_row_mask():
    """SERL's loss: Delta = log pi_T - out.logp (the minibatch's own pass), w on the action
    tokens of prompted rows only. Two episodes x 2 turns x 2 tokens, lam 0.5, clip 0.2,
    token-mean, eps 0.2; every token is a response token.

    Episode 0 (A = +1): token (0, 0) is an action token of a prompted row: Delta = -1.0 -
      (-1.1) = 0.1, w = e^0.1, m = 0.5 + 0.5 e^0.1; rho = e^(-1.1 + 1.0) = e^-0.1 (not
      clipped), so its loss is -e^-0.1 (0.5 + 0.5 e^0.1) = -(0.5 e^-0.1 + 0.5). Token (0, 1)
      is a reasoning token, row 1 is not prompted: C = A = 1 at rho = 1 (loss -1 each).
    Episode 1 (A = -2, rho = 1): (0, 0) Delta = -0.2 + 0.5 = 0.3, sign(A) Delta = -0.3,
      w = clip(e^-0.3 = 0.741, 0.8, 1.2) = 0.8, m = 0.9, C = -1.8 (loss 1.8); the other
      three keep A = -2 (loss 2 each; row 1's Delta = -2.9 is not used: not prompted).
    Loss = (-(0.5 e^-0.1 + 0.5) - 3 + 1.8 + 6) / 8.
    With Delta from logp_old instead, token (0, 0) of episode 0 would get w = e^0 = 1."""
    import types

    from asct_jax.rl.types import Credit
    from factor_jax.baselines import serl_policy_loss
    teacher = jnp.array([[[-1.0, -2.0], [-0.5, -0.1]], [[-0.2, -1.0], [-3.0, -0.1]]])
    logp = jnp.array([[[-1.1, -1.5], [-0.5, -0.3]], [[-0.5, -1.0], [-0.1, -0.1]]])
    logp_old = logp.at[0, 0, 0].set(-1.0)
    reweight = jnp.array([[[True, False], [False, False]], [[True, False], [False, False]]])
    tokens = jnp.ones((2, 2, 2), bool)
    credit = Credit(coef=jnp.zeros((2, 2, 2)), value_targets=jnp.zeros((2, 2)), metrics={},
                    loss_inputs={"teacher_logp": teacher, "advantage": jnp.array([1.0, -2.0]),
                                 "reweight": reweight, "lambda": jnp.float32(0.5)})
    mb = types.SimpleNamespace(logp_old=logp_old, token_mask=tokens)
    ppo = types.SimpleNamespace(clip_eps=0.2, aggregation="token_mean", dual_clip=0.0)
    loss, m = serl_policy_loss(_serl_config(), None)(
        types.SimpleNamespace(logp=logp), mb, credit, ppo)
    want = (-(0.5 * math.exp(-0.1) + 0.5) - 3.0 + 1.8 + 6.0) / 8.0
    np.testing.assert_allclose(loss, want, rtol=1e-6)
    assert "clip_frac" in m


@given(st.integers(0, 2**31 - 1), st.floats(0.0, 1.0))
def test_policy_loss_at_the_behaviour_policy_is_the_credit_loss(seed, lam):
    """At out.logp = logp_old (the first minibatch of an update) the plug-in's loss equals
    the clipped surrogate on the credit's coef (Delta from logp_old)."""
    import types

    from asct_jax.rl import losses
    from asct_jax.rl.types import Credit
    from factor_jax.baselines import serl_policy_loss
    rng = np.random.default_rng(seed)
    b = random_batch(rng, B, T, A, scale=3.0)
    adv = jnp.asarray(rng.normal(size=(B,)), jnp.float32)
    tok = jnp.asarray(b["token_mask"])
    reweight = tok & jnp.asarray(rng.random((B, T, 1)) < 0.6)
    old = jnp.asarray(b["student_logp"])
    teacher = jnp.asarray(b["teacher_logp"])
    coef = fj.serl_coefficients(adv, fj.hindsight_delta(teacher, old, tok), reweight, tok, lam)
    credit = Credit(coef=coef, value_targets=jnp.zeros((B, T)), metrics={},
                    loss_inputs={"teacher_logp": teacher, "advantage": adv,
                                 "reweight": reweight, "lambda": jnp.float32(lam)})
    mb = types.SimpleNamespace(logp_old=old, token_mask=tok)
    ppo = types.SimpleNamespace(clip_eps=0.2, aggregation="token_mean", dual_clip=3.0)
    got, _ = serl_policy_loss(_serl_config(), None)(types.SimpleNamespace(logp=old), mb,
                                                    credit, ppo)
    want, _ = losses.policy_loss(old, old, coef, tok, 0.2, "token_mean")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


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
    policy = types.SimpleNamespace(prompt=PromptTokens(), pad_id=0, vocab_size=len(tok))
    words = lambda x: tok.convert_ids_to_tokens([int(i) for i in x[0] if i != 0])  # noqa: E731
    serl = words(teacher_prefix(policy, obs, fb))
    assert render_text(serl) == ("you see a mug\n\nimmediate feedback from the current step:\n"
                                 "mug is clean\n\ncorrectly solve the current task.\n")
    assert serl[4:6] == ["<sep>", "<sep>"] and serl[-1] == "<sep>"
    assert words(teacher_prefix(policy, obs, fb, "appended")) == (
        ["you", "see", "a", "mug", "<sep>", "mug", "is", "clean"])
    small = types.SimpleNamespace(prompt=PromptTokens(), pad_id=0, vocab_size=50)
    with pytest.raises(ValueError, match="past the policy's vocabulary"):
        teacher_prefix(small, obs, fb)          # another vocabulary: a clear error, not NaN
    vocab = wt.vocabulary()
    n_env = len(set(wt._word_source()) - set(wt.SPECIAL_TOKENS)) + len(wt.SPECIAL_TOKENS)
    assert vocab[5:n_env] == sorted(vocab[5:n_env]) and vocab[:5] == list(wt.SPECIAL_TOKENS)
    assert {"immediate", "correctly", "solve"} <= set(vocab[n_env:])


def test_serl_credit_feeds_its_policy_loss(credit_setup):
    """The registered method end to end: a turn without feedback gets no teacher prompt
    (its tokens keep A in the loss inputs), lam_1 = 0.5, and at the behaviour policy the
    plug-in's loss equals the clipped surrogate on the credit's coef."""
    import types

    from asct_jax.rl import losses
    from asct_jax.rl.types import action_tokens
    from experiments.configs import base
    from experiments.harness import registry
    c = base.use_test_model(base.get_config())
    c.env.name = "household"
    c, ctx, params, batch = credit_setup(c)
    batch = batch.replace(feedback=batch.feedback.at[0, 0].set(ctx.policy.pad_id))
    m = registry.get("serl")
    cfg = m.make_config(c)
    mstate = m.init_state(cfg, ctx, params, jax.random.key(3))
    credit = jax.jit(m.make_credit(cfg, ctx))(params, batch, jax.random.key(2), jnp.int32(0),
                                              mstate)
    li = credit.loss_inputs
    rows = np.asarray(batch.turn_mask).copy()
    rows[0, 0] = False
    np.testing.assert_array_equal(li["reweight"], np.asarray(action_tokens(batch))
                                  & rows[..., None])
    np.testing.assert_allclose(li["lambda"], 0.5)
    ppo = types.SimpleNamespace(clip_eps=0.2, aggregation="token_mean", dual_clip=3.0)
    out = types.SimpleNamespace(logp=batch.logp_old)
    got, _ = m.make_policy_loss(cfg, ctx)(out, batch, credit, ppo)
    want, _ = losses.policy_loss(batch.logp_old, batch.logp_old, credit.coef,
                                 batch.token_mask, 0.2, "token_mean")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_bad_teacher_prompt_names_the_field():
    from asct_jax.infra.checks import ConfigError
    from experiments.configs import base
    from factor_jax.baselines import serl_config
    c = base.get_config()
    c.serl.teacher_prompt = "hindsight"
    with pytest.raises(ConfigError, match=r"^serl\.teacher_prompt: "):
        serl_config(c)
