"""The counterfactual rows of the hindsight warm start (factor_jax/hindsight/counterfactual.py):
each drawn candidate's row is the credit's teacher prompt with that candidate's own
feedback, its target follows its progress, and the option leaves the other rows as they
were."""
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from factor_jax.hindsight import counterfactual as cf
from factor_jax.hindsight import warm_start as hw
from asct_jax.rl import warm_start as ws
from tests.helpers.rl_train import small_config
from tests.helpers.tiers import examples


@pytest.fixture(scope="module")
def noisy():
    """(source, policy, params, noisy-expert episodes [8, T], their HindsightTurns without
    and with C = 4 counterfactual candidates) on household."""
    from asct_jax.rl.build import build_policy
    from asct_jax.rl.run_config import run_config
    from asct_jax.rl.sources import JaxEnvSource

    c = small_config("/tmp")
    source = JaxEnvSource(c)
    data = jax.jit(ws.expert_episodes, static_argnums=(0, 3))(
        source.env, source.env_params, jax.random.key(0), 8, 0.5)
    turns = jax.jit(hw.hindsight_turns, static_argnums=(0, 4, 5))
    plain, counter = (turns(source.env, source.env_params, data.rollout, jax.random.key(1),
                            "expert", n) for n in (0, cf.CANDIDATES))
    policy, params = build_policy(run_config(c), source.vocab_size, source.shape,
                                  source.prompt)
    return source, policy, params, data, plain, counter


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 7), st.integers(1, 6))
def test_drawn_candidates_are_the_expert_then_distinct_legal_others(seed, k, m):
    """Slot 0 is a*_t; the valid slots are distinct legal candidates; there are
    min(C - 1, legal others) valid others."""
    r = np.random.default_rng(seed)
    legal = r.random((m, k)) < 0.6
    expert = r.integers(0, k, m)
    legal[np.arange(m), expert] = True
    index, valid = (np.asarray(x) for x in cf.draw_candidates(
        jax.random.key(seed), jnp.asarray(legal), jnp.asarray(expert, jnp.int32)))
    np.testing.assert_array_equal(index[:, 0], expert)
    assert valid[:, 0].all()
    for i in range(m):
        got = index[i][valid[i]]
        assert len(set(got)) == len(got) and legal[i, got].all()
        assert valid[i].sum() - 1 == min(cf.CANDIDATES - 1, legal[i].sum() - 1)


@pytest.mark.slow
def test_the_counterfactual_prompt_is_the_teacher_prefix_with_the_candidates_feedback(noisy):
    """Each drawn candidate's feedback is the environment's answer to it at the stored
    state, and the sampled row's prompt is teacher_prefix (FACTOR's) of x_t with it: the
    same prefix x_t with different feedbacks."""
    source, policy, _, data, _, t = noisy
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    states = jax.tree.map(flat, data.rollout.states)
    live = np.asarray(t.live)
    resp = jnp.take_along_axis(t.cands, t.cf_index[:, :, None], axis=1)      # [M, C, A]
    fb = jax.vmap(jax.vmap(lambda s, y: source.env.step(hw._fresh_turns(s), y,
                                                       source.env_params)[1].feedback,
                           in_axes=(None, 0)))(states, resp)
    ok = live[:, None] & np.asarray(t.cf_valid)
    np.testing.assert_array_equal(np.asarray(fb)[ok], np.asarray(t.cf_feedback)[ok])
    differ = np.asarray(t.cf_feedback[:, 0] != t.cf_feedback[:, 1]).any(-1)
    assert differ[ok[:, 1]].mean() > 0.5            # different feedbacks at the same x_t
    mb = hw.sample(jax.random.key(3), t, 32)
    rows = hw.prompts(policy, mb)
    want = hw.teacher_prefix(policy, mb["obs"], mb["cf_feedback"])
    np.testing.assert_array_equal(np.asarray(rows["counterfactual"]), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(rows["real"]), np.asarray(
        hw.teacher_prefix(policy, mb["obs"], mb["feedback"])))


@settings(max_examples=examples(30), deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_the_counterfactual_target_follows_progress(seed):
    """The sampled row's target is the drawn candidate c itself, a valid one other than
    a*_t (slot 0) where there is one: toward c where c made progress, away from it where
    it did not."""
    r = np.random.default_rng(seed)
    m, c, k, n = 5, cf.CANDIDATES, 6, 12
    cands = jnp.asarray(r.integers(1, 50, (m, k, 3)), jnp.int32)
    index = jnp.asarray(np.stack([r.permutation(k)[:c] for _ in range(m)]), jnp.int32)
    valid = r.random((m, c)) < 0.7
    valid[:, 0] = True
    progress = jnp.asarray(r.random((m, c)) < 0.5) & valid
    fb = jnp.asarray(r.integers(0, 50, (m, c, 2)), jnp.int32)
    idx = jnp.asarray(r.integers(0, m, n))
    out = cf.sample_counterfactual(jax.random.key(seed), idx, index, jnp.asarray(valid), fb,
                                   progress, cands)
    got = np.asarray(out["cf_candidate"])
    for j, (i, cand) in enumerate(zip(np.asarray(idx), got)):
        slot = list(np.asarray(index[i])).index(cand)
        assert valid[i, slot] and (slot > 0 or not valid[i, 1:].any())
        np.testing.assert_array_equal(np.asarray(out["cf_feedback"][j]), np.asarray(fb[i, slot]))
        np.testing.assert_array_equal(np.asarray(out["counterfactual_action"][j]),
                                      np.asarray(cands[i, cand]))
        assert bool(out["counterfactual_away"][j]) == (not bool(progress[i, slot]))


def test_counterfactual_progress_is_step_progress_of_each_candidate(noisy):
    """cf_progress is step_progress of the drawn candidate at the stored state (the
    expert is deterministic on household: the keys do not matter); a*_t's step makes
    progress."""
    source, _, _, data, _, t = noisy
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    states = jax.tree.map(flat, data.rollout.states)
    resp = jnp.take_along_axis(t.cands, t.cf_index[:, :, None], axis=1)
    prog, _ = jax.vmap(jax.vmap(
        lambda s, y: hw.step_progress(source.env, source.env_params, s, y, jax.random.key(0)),
        in_axes=(None, 0)))(states, resp)
    ok = np.asarray(t.live)[:, None] & np.asarray(t.cf_valid)
    np.testing.assert_array_equal(np.asarray(prog)[ok], np.asarray(t.cf_progress)[ok])
    assert np.asarray(t.cf_progress)[np.asarray(t.live), 0].mean() > 0.9


@pytest.mark.slow
def test_the_option_leaves_the_other_rows_and_names_as_they_were(noisy):
    """Every field but the counterfactual ones, and the other rows' sampled batch, are the
    same with and without the counterfactual candidates ("feedback" warm starts are
    unchanged); without them no counterfactual row is sampled; "counterfactual" names
    another warm start than "feedback" and "none"."""
    from experiments.configs import base
    from experiments.harness import warm_start as shared_ws

    source, policy, params, _, plain, counter = noisy
    for f in ("obs", "feedback", "failure", "cands", "legal", "taken", "expert", "progress",
              "live"):
        np.testing.assert_array_equal(np.asarray(getattr(plain, f)),
                                      np.asarray(getattr(counter, f)))
    assert plain.cf_index.shape[1] == 0 and counter.cf_index.shape[1] == cf.CANDIDATES
    a, b = (hw.sample(jax.random.key(4), t, 16) for t in (plain, counter))
    assert "cf_feedback" not in a and "counterfactual" not in hw.prompts(policy, a)
    for k, v in a.items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(b[k]))
    _, parts = hw.hindsight_loss(policy, params, b)
    assert set(parts) == {"real", "failure", "student", "counterfactual"}
    names = set()
    for option in ("none", "feedback", "counterfactual"):
        c = base.get_config()
        c.warm_start.phase = option
        names.add(shared_ws.key(c))
    assert len(names) == 3


def _cf_logp(policy, params, t, slot):
    """[M]: the teacher's log pi(c | x_t, o_c) of each turn's counterfactual candidate in
    `slot` (its tokens summed)."""
    c = t.cf_index[:, slot]
    action = jnp.take_along_axis(t.cands, c[:, None, None], axis=1)[:, 0]
    prefix = hw.teacher_prefix(policy, t.obs, t.cf_feedback[:, slot])
    logp = policy.token_log_probs(params, prefix, action, t.cands, t.legal)
    return np.asarray(jnp.sum(jnp.where(action != policy.pad_id, logp, 0.0), -1))


@pytest.mark.slow
def test_the_counterfactual_phase_moves_the_teacher_off_what_its_feedback_shows_failed(noisy):
    """After 150 updates of the "counterfactual" phase the teacher prompt, shown a drawn
    candidate's own feedback, holds the candidates that made no progress less likely than
    before and than after as many updates of "feedback" (the same key); its row's loss
    falls and the student stays the actor."""
    from asct_jax.rl.run_config import run_config

    source, policy, params, data, _, t = noisy
    sel = np.asarray(t.live & t.cf_valid[:, 1] & ~t.cf_progress[:, 1])
    assert sel.sum() > 10
    after = {}
    for option in ("feedback", "counterfactual"):
        c = small_config("/tmp")
        c.warm_start.phase = option
        c.warm_start.phase_steps = 150
        c.warm_start.batch = 64
        out, info = hw.hindsight_phase(run_config(c), policy, params, data.rollout,
                                       source.env, source.env_params, jax.random.key(0))
        after[option] = _cf_logp(policy, out, t, 1)[sel].mean()
    assert info["hindsight_counterfactual_loss_last"] < info["hindsight_counterfactual_loss_first"]
    assert info["hindsight_student_loss_last"] < 0.05
    before = _cf_logp(policy, params, t, 1)[sel].mean()
    assert after["counterfactual"] < min(before, after["feedback"]) - 0.3, (before, after)
