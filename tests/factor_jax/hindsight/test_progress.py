"""factor_jax/hindsight/progress.py on household (its expert is deterministic): scripted
picks the env's policy by name; expert_finish is (G*, d*) of a Python replay of the expert
from the state with its turn counter reset, (0, 0) when done; step_progress and
candidate_progress are the documented rule r + G*(s') >= G*(s) - 1e-6 and (s' done or
d*(s') + 1 <= d*(s)) against that replay, for every legal candidate of a few states, and
do not depend on the stored state's turn counter; the expert's step is progress, an
unparsable one (nothing happens, no reward) is not; failure_feedback is the environment's
answer to all-PAD. (Progress inside hindsight_turns and the counterfactual rows:
tests/factor_jax/hindsight/test_warm_start.py, test_counterfactual.py.)"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.envs import household, make
from asct_jax.envs.base import PAD_ID
from factor_jax.hindsight import progress as pg


@pytest.fixture(scope="module")
def env():
    """(env, params, jitted step, jitted legal_actions, states): household small, its
    reset states of keys 0, 1, the states after one and two expert steps from key 0 and the
    one before its last step (a rewarded, final step)."""
    env, params = make("household", size="small")
    step = jax.jit(lambda s, a: env.step(s, a, params))
    legal = jax.jit(lambda s: env.legal_actions(s, params))
    states = [env.reset(jax.random.key(k), params)[0] for k in (0, 1)]
    s = states[0]
    path = []
    while not bool(s.done):
        path.append(s)
        cands, _ = legal(s)
        s = step(s, cands[int(env.expert_policy(s, params))])[0]
    states += [path[1], path[2], path[-1]]
    return env, params, step, legal, states


def _replay(env, params, step, legal, state):
    """(G*, d*): the expert played from `state` (turn counter 0) in Python."""
    s, g, d = state.replace(turn=jnp.zeros_like(state.turn)), 0.0, 0
    while not bool(s.done) and d < env.max_turns:
        cands, ok = legal(s)
        a = int(env.expert_policy(s, params))
        a = a if bool(ok[a]) else int(np.argmax(np.asarray(ok)))
        s, ts = step(s, cands[a])
        g, d = g + float(ts.reward), d + 1
    return g, d


def _rule(env, params, step, legal, state, response):
    fresh = state.replace(turn=jnp.zeros_like(state.turn))
    s1, ts = step(fresh, response)
    g0, d0 = _replay(env, params, step, legal, state)
    g1, d1 = _replay(env, params, step, legal, s1)
    return (float(ts.reward) + g1 >= g0 - 1e-6) and (bool(ts.done) or d1 + 1 <= d0)


def test_scripted_is_the_envs_policy_of_that_name():
    env, _ = make("household", size="small")
    assert pg.scripted(env) == env.expert_policy
    assert pg.scripted(env, "random") is household.random_policy
    with pytest.raises(ValueError, match="has no 'nobody' policy"):
        pg.scripted(env, "nobody")


def test_expert_finish_is_the_replayed_experts_return_and_turns(env):
    e, params, step, legal, states = env
    finish = jax.jit(lambda s, k: pg.expert_finish(e, params, s, k))
    for s in states:
        g, d = finish(s, jax.random.key(0))
        want_g, want_d = _replay(e, params, step, legal, s)
        assert int(d) == want_d and 0 < want_d <= e.max_turns
        np.testing.assert_allclose(float(g), want_g, rtol=1e-6)
        late = s.replace(turn=jnp.asarray(e.max_turns - 1, s.turn.dtype))   # counter reset
        g2, d2 = finish(late, jax.random.key(0))
        assert (float(g2), int(d2)) == (float(g), int(d))
    _, d0 = finish(states[0], jax.random.key(0))       # the expert's own steps: one less
    for n, s in ((1, states[2]), (2, states[3]), (int(d0) - 1, states[4])):
        g, d = finish(s, jax.random.key(0))
        assert int(d) == int(d0) - n
    done = states[0].replace(done=jnp.asarray(True))
    assert tuple(map(float, finish(done, jax.random.key(0)))) == (0.0, 0.0)


def test_step_and_candidate_progress_are_the_documented_rule(env):
    e, params, step, legal, states = env
    one = jax.jit(lambda s, y: pg.step_progress(e, params, s, y, jax.random.key(1)))
    many = jax.jit(lambda s, y: pg.candidate_progress(e, params, s, y, jax.random.key(1)))
    pad = jnp.full((e.action_len,), PAD_ID, jnp.int32)
    for s in states:
        cands, ok = legal(s)
        rows = jnp.concatenate([cands[np.asarray(ok)], pad[None]], 0)      # legal + PAD
        prog, fb = many(s, rows)
        want = [_rule(e, params, step, legal, s, y) for y in rows]
        np.testing.assert_array_equal(np.asarray(prog), want)
        expert = int(e.expert_policy(s, params))
        assert bool(prog[int(np.asarray(ok)[:expert].sum())])        # the expert's step
        assert not bool(prog[-1])                                     # nothing happens
        late = s.replace(turn=jnp.asarray(e.max_turns - 1, s.turn.dtype))
        for i, y in enumerate(rows):
            p1, f1 = one(late, y)
            assert bool(p1) == bool(prog[i])
            np.testing.assert_array_equal(f1, fb[i])
            np.testing.assert_array_equal(fb[i], step(s.replace(turn=jnp.zeros_like(
                s.turn)), y)[1].feedback)


def test_failure_feedback_is_the_answer_to_all_pad(env):
    e, params, step, _, states = env
    late = states[1].replace(turn=jnp.asarray(e.max_turns - 1, states[1].turn.dtype))
    fb = np.asarray(pg.failure_feedback(e, params, late))
    np.testing.assert_array_equal(fb, np.asarray(e.f_nothing))
    np.testing.assert_array_equal(
        fb, step(states[1], jnp.full((e.action_len,), PAD_ID, jnp.int32))[1].feedback)
