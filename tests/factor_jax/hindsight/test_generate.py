"""The hindsight phase for the generating actor (factor_jax/hindsight/generate.py): its
targets are the canonical responses SFT teaches, its prompts FACTOR's generate-mode
teacher's, the away loss is exact and lowers pi(c), the phase runs end to end, a bad
combination is a one-line ConfigError."""
import types

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings

from asct_jax.infra.checks import ConfigError
from factor_jax.hindsight import generate as hg
from factor_jax.hindsight import warm_start as hw
from asct_jax.rl import warm_start as ws
from asct_jax.rl.generation import GenerationSpec, canonical_response
from asct_jax.envs.projection import Tags
from tests.helpers.rl_train import small_config
from tests.helpers.tiers import examples

PAD, EOS = 0, 1
SPEC = GenerationSpec(tags=Tags((90,), (91,), (92,), (93,)), stop_id=EOS, response_len=12)


def _config(**warm):
    c = small_config("/tmp")
    c.env.name = "shop"
    c.actor.chooser = "generate"
    for k, v in warm.items():
        c.warm_start[k] = v
    return c


@pytest.fixture(scope="module")
def generated():
    """(source, policy, params, noisy-expert episodes [8, T] written by the generating
    actor's expert, their HindsightTurns with 4 counterfactual candidates) on shop."""
    from asct_jax.rl.build import build_policy
    from asct_jax.rl.run_config import run_config
    from asct_jax.rl.sources import JaxEnvSource

    rc = run_config(_config())
    source = JaxEnvSource(rc)
    policy, params = build_policy(rc, source.vocab_size, source.shape, source.prompt)
    data = jax.jit(ws.expert_episodes, static_argnums=(0, 3, 5, 6, 7))(
        source.env, source.env_params, jax.random.key(0), 8, 0.5, policy.pad_id, "expert",
        policy.spec).rollout
    turns = jax.jit(hw.hindsight_turns, static_argnums=(0, 4, 5, 6, 7))(
        source.env, source.env_params, data, jax.random.key(1), "expert", 4, policy.spec,
        policy.pad_id)
    return source, policy, params, data, turns


def _turns(cands, taken, expert, progress):
    """Hand-built HindsightTurns over canonical candidates [M, K, R']."""
    m, k, _ = cands.shape
    return hw.HindsightTurns(
        obs=jnp.full((m, 3), 5, jnp.int32), feedback=jnp.full((m, 2), 6, jnp.int32),
        failure=jnp.full((m, 2), 7, jnp.int32), cands=cands, legal=jnp.ones((m, k), bool),
        taken=jnp.asarray(taken, jnp.int32), expert=jnp.asarray(expert, jnp.int32),
        progress=jnp.asarray(progress), live=jnp.ones((m,), bool),
        student_logp=jnp.zeros((m, cands.shape[2], 4)), cf_index=jnp.zeros((m, 0), jnp.int32),
        cf_valid=jnp.zeros((m, 0), bool), cf_feedback=jnp.zeros((m, 0, 2), jnp.int32),
        cf_progress=jnp.zeros((m, 0), bool))


def test_the_rows_targets_are_canonical_responses_on_a_hand_built_case():
    """Two candidates "c5 c6" and "c7": their canonical responses, the action tokens
    inside the tags, and each row's target: real -> y_t on progress else a*_t; failure ->
    a*_t where it differs from y_t, else away from y_t."""
    env_cands = jnp.asarray([[[5, 6, EOS], [7, EOS, PAD]]] * 3)            # [3, 2, A=3]
    cands = canonical_response(env_cands, SPEC, PAD)
    want = {0: [90, 91, 92, 5, 6, 93, EOS, PAD], 1: [90, 91, 92, 7, 93, EOS, PAD, PAD]}
    for k, w in want.items():
        np.testing.assert_array_equal(np.asarray(cands[0, k]), w)
    assert hg.canonical_len(SPEC, 3) == cands.shape[-1] == 8
    mask = np.asarray(hg.action_token_mask(cands[0], SPEC, PAD))
    np.testing.assert_array_equal(mask, [[0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0, 0, 0]])
    # turn 0: y = 1 made progress, a* = 0; turn 1: y = 1 did not; turn 2: y = a* = 0, no
    # progress. obs row m is [m, m, m] + 10, so a sampled row names its turn.
    turns = _turns(cands, [1, 1, 0], [0, 0, 0], [True, False, False]).replace(
        obs=jnp.repeat(jnp.arange(10, 13, dtype=jnp.int32)[:, None], 3, 1))
    target = {"real": [1, 0, 0], "failure": [0, 0, 0]}
    away = {"real": [False, False, False], "failure": [False, False, True]}
    t = {row: tuple(np.asarray(x) for x in v) for row, v in hw.targets(turns).items()}
    mb = hw.sample(jax.random.key(0), turns, 64)
    m = np.asarray(mb["obs"])[:, 0] - 10
    assert set(m) == {0, 1, 2}
    for row in target:
        np.testing.assert_array_equal(t[row][0], target[row])
        np.testing.assert_array_equal(t[row][1], away[row])
        want_resp = np.asarray(cands)[m, np.asarray(target[row])[m]]
        np.testing.assert_array_equal(np.asarray(mb[f"{row}_action"]), want_resp)
        np.testing.assert_array_equal(np.asarray(mb[f"{row}_away"]), np.asarray(away[row])[m])
    np.testing.assert_array_equal(np.asarray(hg.taken_responses(mb["cands"], mb["taken"])),
                                  np.asarray(cands)[m, np.asarray([1, 1, 0])[m]])


@pytest.mark.slow
def test_generated_turns_step_the_taken_candidate_and_teach_canonical_responses(generated):
    """The environment replays the recorded step (the taken candidate's tokens give the
    recorded feedback); the candidates are canonical_response of the environment's; the
    taken one is the response the expert wrote; the teacher prompt is FACTOR's
    generate-mode teacher's, the student's the actor's own prompt."""
    from factor_jax import teacher

    source, policy, _, data, turns = generated
    merge = lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])  # noqa: E731
    flat = lambda x: np.asarray(merge(x))  # noqa: E731
    live = np.asarray(turns.live)
    assert live.sum() > 20
    np.testing.assert_array_equal(
        np.asarray(turns.cands),
        np.asarray(canonical_response(jnp.asarray(flat(data.cand_tokens)), policy.spec,
                                      policy.pad_id)))
    written = flat(data.responses)[:, :turns.cands.shape[2]]
    np.testing.assert_array_equal(
        np.asarray(hg.taken_responses(turns.cands, turns.taken))[live], written[live])
    resp = hg.env_responses(data.cand_tokens, data.action_index)
    _, fb = jax.vmap(lambda s, y, k: hw.step_progress(source.env, source.env_params, s, y, k))(
        jax.tree.map(merge, data.states), merge(resp), jax.random.split(jax.random.key(2), live.size))
    np.testing.assert_array_equal(np.asarray(fb)[live], flat(data.feedback)[live])
    ctx = types.SimpleNamespace(policy=policy)
    credit_prefix = np.asarray(teacher._teacher_args(ctx, data, "serl")[0])
    rows = hw.prompts(policy, {f: getattr(turns, f) for f in ("obs", "feedback", "failure")})
    np.testing.assert_array_equal(np.asarray(rows["real"]), credit_prefix)
    np.testing.assert_array_equal(np.asarray(rows["student"]), flat(data.prompts))


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.floats(-12.0, 0.0), min_size=1, max_size=5), st.integers(0, 3))
def test_away_log1m_is_log_one_minus_the_action_probability(lps, pad_front):
    """log(1 - prod p_j) over the masked positions, from log p_j and log(1 - p_j); the
    unmasked positions (format tokens) are ignored; finite with a finite gradient even
    where p rounds to 1."""
    lp = np.asarray([0.0] * pad_front + lps + [-0.3], np.float64)
    mask = np.asarray([False] * pad_front + [True] * len(lps) + [False])
    log1m = np.log(-np.expm1(np.minimum(lp, -1e-300)))
    log1m = np.where(lp == 0.0, -40.0, log1m)          # p = 1 - e^-40: 1 - p kept exact
    got = float(hg.away_log1m(jnp.asarray(lp[None], jnp.float32),
                              jnp.asarray(log1m[None], jnp.float32), jnp.asarray(mask[None]))[0])
    p = np.exp(lp[mask])
    q = np.exp(log1m[mask])
    want = np.log(sum(np.prod(p[:j]) * q[j] for j in range(len(p))))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    g = jax.grad(lambda a, b: hg.away_log1m(a, b, jnp.asarray(mask[None]))[0], (0, 1))(
        jnp.asarray(lp[None], jnp.float32), jnp.asarray(log1m[None], jnp.float32))
    assert all(np.isfinite(np.asarray(x)).all() for x in g)
    assert float(hg.away_log1m(jnp.zeros((1, 3)), jnp.zeros((1, 3)),
                               jnp.zeros((1, 3), bool))[0]) == 0.0


def test_log1m_token_is_the_other_entries_mass():
    logits = jnp.asarray([[2.0, 30.0, -1.0], [0.5, 0.1, 0.2]])
    logp = jax.nn.log_softmax(logits, -1)
    got = hg.log1m_token(logp[..., None], jnp.ones(logp.shape + (1,), bool),
                         jnp.asarray([[1], [2]]))[:, 0]
    p = np.asarray(jax.nn.softmax(logits, -1), np.float64)
    np.testing.assert_allclose(np.asarray(got)[1], np.log(1 - p[1, 2]), rtol=1e-5)
    assert np.isfinite(float(got[0])) and float(got[0]) < -25.0    # 1 - p ~ e^-28


def _action_logp(policy, params, prefix, resp):
    logp = policy.token_log_probs(params, prefix, resp)
    mask = hg.action_token_mask(resp, policy.spec, policy.pad_id) & (resp != policy.pad_id)
    return np.asarray(jnp.sum(jnp.where(mask, logp, 0.0), -1))


@pytest.mark.slow
def test_the_away_loss_is_finite_and_lowers_pi_c(generated):
    """A few Adam steps on the away loss of candidates' canonical responses lower their
    action tokens' log-probability (the format tokens' stay), the loss finite throughout;
    toward raises it."""
    _, policy, params, _, turns = generated
    live = np.flatnonzero(np.asarray(turns.live))[:16]
    prefix = hw.teacher_prefix(policy, turns.obs[live], turns.feedback[live])
    resp = hg.taken_responses(turns.cands[live], turns.taken[live])
    adam = optax.adam(3e-3)
    for away, sign in ((True, -1), (False, 1)):
        flags = jnp.full((len(live),), away)
        loss = jax.jit(lambda p: hg.response_loss(policy, p, prefix, resp, flags))
        p, opt = params, adam.init(params)
        for _ in range(5):
            value, g = jax.value_and_grad(loss)(p)
            assert np.isfinite(float(value))
            upd, opt = adam.update(g, opt, p)
            p = optax.apply_updates(p, upd)
        before = _action_logp(policy, params, prefix, resp)
        after = _action_logp(policy, p, prefix, resp)
        assert sign * (after.mean() - before.mean()) > 0.1, (away, before.mean(), after.mean())


def test_the_student_row_is_zero_at_the_sft_actor(generated):
    """KL to the SFT actor along the taken canonical response: 0 at the parameters the
    distributions were taken from, positive elsewhere; one [M, R', V] array."""
    _, policy, params, _, turns = generated
    turns = jax.jit(hw.with_student, static_argnums=0)(policy, params, turns)
    m, k, r = turns.cands.shape
    assert turns.student_logp.shape == (m, r, policy.vocab_size)
    mb = hw.sample(jax.random.key(5), turns, 16)
    at_sft = float(hw.hindsight_loss(policy, params, mb)[1]["student"])
    moved = jax.tree.map(lambda x: x * 1.5, params)
    assert abs(at_sft) < 1e-4
    assert float(hw.hindsight_loss(policy, moved, mb)[1]["student"]) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("option", ["feedback", "counterfactual"])
def test_the_phase_runs_end_to_end_for_the_generating_actor(generated, option):
    """hindsight_phase on the generating actor's episodes: finite losses for its rows,
    the parameters move, the counterfactual row only with "counterfactual"."""
    from asct_jax.rl.run_config import run_config

    source, policy, params, data, _ = generated
    rc = run_config(_config(phase=option, phase_steps=3, batch=16))
    out, info = hw.hindsight_phase(rc, policy, params, data, source.env, source.env_params,
                                   jax.random.key(3))
    rows = ("real", "failure", "student") + (("counterfactual",) if option ==
                                             "counterfactual" else ())
    for row in rows:
        for when in ("first", "last"):
            assert np.isfinite(info[f"hindsight_{row}_loss_{when}"])
    assert ("hindsight_counterfactual_loss_first" in info) == (option == "counterfactual")
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), out, params)
    assert max(jax.tree.leaves(moved)) > 0


def test_a_response_too_short_for_the_canonical_one_is_a_one_line_config_error(generated):
    source, policy, params, data, _ = generated
    from asct_jax.rl.build import build_policy
    from asct_jax.rl.run_config import run_config

    c = _config(phase="feedback", phase_steps=1, batch=4)
    c.actor.response_len = 6
    rc = run_config(c)
    short, p = build_policy(rc, source.vocab_size, source.shape, source.prompt)
    with pytest.raises(ConfigError, match=r"^actor\.response_len: 6 ") as e:
        hw.hindsight_phase(rc, short, p, data, source.env, source.env_params,
                           jax.random.key(0))
    assert "\n" not in str(e.value) and "warm_start.phase" in str(e.value)


def test_generated_episodes_with_a_candidates_actor_are_a_one_line_config_error(generated):
    from asct_jax.rl.build import build_policy
    from asct_jax.rl.run_config import run_config

    source, _, _, data, _ = generated
    c = _config(phase="feedback", phase_steps=1, batch=4)
    c.actor.chooser = "candidates"
    rc = run_config(c)
    policy, params = build_policy(rc, source.vocab_size, source.shape, source.prompt)
    with pytest.raises(ConfigError, match=r"^warm_start\.phase: 'feedback' with a "
                       r"Policy on generated episodes") as e:
        hw.hindsight_phase(rc, policy, params, data, source.env, source.env_params,
                           jax.random.key(0))
    assert "\n" not in str(e.value)


def test_the_generating_table_reads_the_feedback_and_candidate_names_stay():
    """factor_generate's warm start has the phase (its name is not the SFT one's); a
    candidate-mode config's name is the one it had without the fields."""
    from experiments.configs import base, factor_generate
    from experiments.harness import warm_start as shared_ws

    c = factor_generate.get_config("quick_warm")
    c.env.name = "shop"
    assert c.warm_start.phase == "feedback"
    name = shared_ws.key(c)
    c.warm_start.phase = "none"
    assert shared_ws.key(c) != name
    cand = base.get_config()
    old = base.get_config()
    del old.warm_start["phase"], old.warm_start["phase_steps"]
    assert shared_ws.key(cand) == shared_ws.key(old)


def _taken_gap(policy, params, turns):
    """Mean over the progress steps of log pi_T(r(y_t) | p_t, o_{t+1}) - log pi_T(r(y_t) |
    p_t, "nothing happens") (the teacher's log-probs summed over r(y_t)'s tokens)."""
    taken = hg.taken_responses(turns.cands, turns.taken)
    real = taken != policy.pad_id

    def lp(fb):
        logp = policy.token_log_probs(params, hw.teacher_prefix(policy, turns.obs, fb), taken)
        return np.asarray(jnp.sum(jnp.where(real, logp, 0.0), -1))
    sel = np.asarray(turns.live & turns.progress)
    return float(np.mean((lp(turns.feedback) - lp(turns.failure))[sel]))


@pytest.mark.slow
def test_the_phase_teaches_the_generating_teacher_to_read_the_feedback(generated):
    """After the phase, on the progress steps the teacher prompt holds the taken canonical
    response likelier with its real feedback than with "nothing happens" (before it, the
    two barely differ), the real row's loss falls and the student stays the actor."""
    from asct_jax.rl.run_config import run_config

    source, policy, params, data, turns = generated
    rc = run_config(_config(phase="feedback", phase_steps=60, batch=64))
    out, info = hw.hindsight_phase(rc, policy, params, data, source.env, source.env_params,
                                   jax.random.key(0))
    before, after = _taken_gap(policy, params, turns), _taken_gap(policy, out, turns)
    # from a random init the format is learnt first: 0.003 -> 0.09 nats at 60 steps
    # (0.14 at 150); the candidates actor's gap grows faster (test_hindsight_warm_start)
    assert abs(before) < 0.02 and after > 0.05, (before, after)
    assert info["hindsight_real_loss_last"] < info["hindsight_real_loss_first"]
    # summed over the response's ~11 tokens: about 0.01 nats a token
    assert info["hindsight_student_loss_last"] < 0.2, info
