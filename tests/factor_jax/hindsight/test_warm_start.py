"""The hindsight phase of the warm start (factor_jax/hindsight/warm_start.py): its
prompts are the credit's teacher prompt, its targets follow the step's progress, and the
option off changes neither the warm start's parameters nor its name."""
import types

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from factor_jax.hindsight import warm_start as hw
from asct_jax.rl import warm_start as ws
from tests.helpers.rl_train import small_config
from tests.helpers.tiers import examples


def _source(c):
    from asct_jax.rl.sources import JaxEnvSource
    return JaxEnvSource(c)


@pytest.fixture(scope="module")
def noisy():
    """(source, policy, params, noisy-expert episodes [16, T], their HindsightTurns) on
    household."""
    from asct_jax.rl.build import build_policy
    from asct_jax.rl.run_config import run_config

    c = small_config("/tmp")
    source = _source(c)
    data = jax.jit(ws.expert_episodes, static_argnums=(0, 3))(
        source.env, source.env_params, jax.random.key(0), 16, 0.5)
    turns = jax.jit(hw.hindsight_turns, static_argnums=(0, 4))(
        source.env, source.env_params, data.rollout, jax.random.key(1), "expert")
    policy, params = build_policy(run_config(c), source.vocab_size, source.shape,
                                  source.prompt)
    return source, policy, params, data, turns


def test_the_teacher_prompt_is_the_one_factors_credit_reads(noisy):
    """Row for row, the phase's teacher prompt is the prefix FACTOR's teacher builds for the
    same turn (factor_jax.teacher: the same function); the failure row's differs from it
    only in the feedback; the student's is the actor's own input."""
    from factor_jax import teacher

    source, policy, _, data, turns = noisy
    assert teacher.teacher_prefix is hw.teacher_prefix
    credit_prefix = np.asarray(teacher._teacher_args(types.SimpleNamespace(policy=policy),
                                                     data.rollout, "serl")[0])
    rows = hw.prompts(policy, {f: getattr(turns, f) for f in ("obs", "feedback", "failure")})
    np.testing.assert_array_equal(np.asarray(rows["real"]), credit_prefix)
    np.testing.assert_array_equal(np.asarray(rows["student"]), np.asarray(turns.obs))
    nothing = teacher.teacher_prefix(policy, turns.obs, turns.failure)
    np.testing.assert_array_equal(np.asarray(rows["failure"]), np.asarray(nothing))


def test_replayed_steps_are_the_recorded_ones_and_the_failure_is_nothing_happens(noisy):
    """step_progress replays the stored transition (its feedback is the recorded one);
    the failure feedback is the environment's "nothing happens"."""
    from asct_jax.envs.tokenizer import get_tokenizer

    source, _, _, data, turns = noisy
    d = data.rollout
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    live = np.asarray(d.turn_mask).reshape(-1)
    _, fb = jax.vmap(lambda s, y, k: hw.step_progress(source.env, source.env_params, s, y, k))(
        jax.tree.map(flat, d.states), flat(d.responses),
        jax.random.split(jax.random.key(2), live.size))
    np.testing.assert_array_equal(np.asarray(fb)[live], np.asarray(flat(d.feedback))[live])
    vocab = {v: k for k, v in get_tokenizer().get_vocab().items()}
    words = [vocab[int(i)] for i in np.asarray(turns.failure)[live][0]
             if int(i) != source.prompt.pad_id]
    assert " ".join(words) == "nothing happens"


def test_the_experts_steps_make_progress_and_random_ones_mostly_not():
    """Progress is judged by the environment: every step of the noise-free expert's
    household episodes is as good as its own; fewer than half of a uniform policy's are."""
    c = small_config("/tmp")
    source = _source(c)
    play = jax.jit(ws.expert_episodes, static_argnums=(0, 3))
    turns = jax.jit(hw.hindsight_turns, static_argnums=(0, 4))
    for eps, check in ((0.0, lambda f: f == 1.0), (1.0, lambda f: f < 0.5)):
        d = play(source.env, source.env_params, jax.random.key(3), 16, eps).rollout
        t = turns(source.env, source.env_params, d, jax.random.key(4), "expert")
        live = np.asarray(d.turn_mask).reshape(-1)
        frac = float(np.asarray(t.progress)[live].mean())
        assert check(frac), (eps, frac)


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.booleans()),
                min_size=1, max_size=8))
def test_targets_keep_what_worked_and_move_off_what_did_not(rows):
    """real: toward y_t where the step made progress, a*_t where it did not; failure:
    toward a*_t where it differs from y_t, else away from y_t."""
    taken, expert, progress = (np.array(x) for x in zip(*rows))
    m, k = len(rows), 5
    turns = hw.HindsightTurns(
        obs=jnp.zeros((m, 1), jnp.int32), feedback=jnp.zeros((m, 1), jnp.int32),
        failure=jnp.zeros((m, 1), jnp.int32), cands=jnp.zeros((m, k, 1), jnp.int32),
        legal=jnp.ones((m, k), bool), taken=jnp.asarray(taken), expert=jnp.asarray(expert),
        progress=jnp.asarray(progress), live=jnp.ones((m,), bool),
        student_logp=jnp.zeros((m, k)), cf_index=jnp.zeros((m, 0), jnp.int32),
        cf_valid=jnp.zeros((m, 0), bool), cf_feedback=jnp.zeros((m, 0, 1), jnp.int32),
        cf_progress=jnp.zeros((m, 0), bool))
    t = {row: tuple(np.asarray(x) for x in v) for row, v in hw.targets(turns).items()}
    np.testing.assert_array_equal(t["real"][0], np.where(progress, taken, expert))
    assert not t["real"][1].any()
    np.testing.assert_array_equal(t["failure"][0], expert)     # a*_t, or y_t = a*_t
    np.testing.assert_array_equal(t["failure"][1], taken == expert)
    # A progress step's (x_t, y_t): toward y_t with its feedback, and with the failure
    # feedback toward another action or away from y_t.
    assert np.all(~progress | (t["failure"][0] != taken) | t["failure"][1])


@settings(max_examples=examples(20), deadline=None)
@given(st.lists(st.floats(-20.0, -1e-3), min_size=1, max_size=6), st.booleans())
def test_row_loss_is_the_log_likelihood_toward_and_away(lps, away):
    """-log pi(y) toward y, -log(1 - pi(y)) away from it, pi(y) the product over y's real
    tokens (PAD tokens ignored)."""
    logp = jnp.asarray([lps + [5.0]])
    action = jnp.asarray([[7] * len(lps) + [0]])
    got = float(hw._row_loss(logp, action, jnp.asarray([away]), 0))
    p = np.exp(sum(lps))
    want = -np.log1p(-p) if away else -sum(lps)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_the_student_row_is_zero_at_the_sft_actor(noisy):
    """The student's row is KL(pi_SFT || pi) over the candidates: 0 at the parameters it
    was taken from, positive elsewhere."""
    source, policy, params, _, turns = noisy
    turns = hw.with_student(policy, params, turns)
    mb = hw.sample(jax.random.key(5), turns, 16)
    at_sft = float(hw.hindsight_loss(policy, params, mb)[1]["student"])
    moved = jax.tree.map(lambda x: x * 1.5, params)
    assert abs(at_sft) < 1e-5 and float(hw.hindsight_loss(policy, moved, mb)[1]["student"]) > 1e-4


def test_the_option_off_keeps_the_params_and_the_warm_starts_name(noisy):
    """hindsight "none": the phase returns the same parameters and no info; the shared warm
    start's name is the one a config without the fields had; "feedback" renames it."""
    from asct_jax.rl.run_config import run_config
    from experiments.configs import base
    from experiments.harness import warm_start as shared_ws

    source, policy, params, data, _ = noisy
    c = small_config("/tmp")
    out, info = hw.hindsight_phase(run_config(c), policy, params, data.rollout, source.env,
                                   source.env_params, jax.random.key(0))
    assert out is params and info == {}
    c = base.get_config()
    name = shared_ws.key(c)
    old = base.get_config()
    del old.warm_start["phase"], old.warm_start["phase_steps"]
    assert shared_ws.key(old) == name
    c.warm_start.phase = "feedback"
    assert shared_ws.key(c) != name


def test_a_bad_option_is_a_one_line_config_error(noisy):
    """The values are factor_jax's: the experiment edge (registry.check) and the phase
    itself reject another one, naming the field."""
    from asct_jax.infra.checks import ConfigError
    from asct_jax.rl.run_config import run_config
    from experiments.harness import registry

    source, policy, params, data, _ = noisy
    c = small_config("/tmp")
    c.warm_start.phase = "yes"
    with pytest.raises(ConfigError, match=r"^warm_start\.phase: "):
        registry.check(c)
    with pytest.raises(ConfigError, match=r"^warm_start\.phase: "):
        hw.hindsight_phase(run_config(c), policy, params, data.rollout, source.env,
                           source.env_params, jax.random.key(0))


def _taken_gap(policy, params, turns):
    """Mean over the progress steps of log pi_T(y_t | x_t, o_{t+1}) - log pi_T(y_t | x_t,
    "nothing happens") (the teacher's token log-probs summed over y_t)."""
    taken = jnp.take_along_axis(turns.cands, turns.taken[:, None, None], axis=1)[:, 0]
    real = taken != policy.pad_id

    def lp(fb):
        logp = policy.token_log_probs(params, hw.teacher_prefix(policy, turns.obs, fb),
                                      taken, turns.cands, turns.legal)
        return np.asarray(jnp.sum(jnp.where(real, logp, 0.0), -1))
    sel = np.asarray(turns.live & turns.progress)
    return float(np.mean((lp(turns.feedback) - lp(turns.failure))[sel]))


@pytest.mark.slow
def test_the_phase_teaches_the_teacher_to_read_the_feedback(noisy):
    """After the phase, on the progress steps the teacher prompt holds the taken action
    likelier with its real feedback than with "nothing happens" (before it, the two
    barely differ), the real row's loss falls and the student stays the actor."""
    from asct_jax.rl.run_config import run_config

    source, policy, params, data, turns = noisy
    c = small_config("/tmp")
    c.warm_start.phase = "feedback"
    c.warm_start.phase_steps = 60
    c.warm_start.batch = 64
    out, info = hw.hindsight_phase(run_config(c), policy, params, data.rollout, source.env,
                                   source.env_params, jax.random.key(0))
    assert info["hindsight_real_loss_last"] < info["hindsight_real_loss_first"]
    assert info["hindsight_student_loss_last"] < 0.05
    before, after = _taken_gap(policy, params, turns), _taken_gap(policy, out, turns)
    assert abs(before) < 0.1 and after > 0.3, (before, after)
