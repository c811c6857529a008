"""asct_jax.envs.play: play_from (one episode from a restored state), step_turn,
turn_record on numpy and jnp, the actor protocol's candidate sampler."""
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs import play as P
from asct_jax.envs.toy_tree import ToyTree

ENV = ToyTree(num_actions=4, depth=3)


def _policy_fn(state):
    return jnp.arange(ENV.num_actions, dtype=jnp.float32), jnp.float32(0.0)


def test_play_from_takes_the_turns_a_python_loop_takes():
    """play_from = key, sub = split(key) per turn, the candidate actor's Choice sent, the
    rewards summed from start_return, its tokens counted, stopped at done or the cap; a
    Recorder sees each turn."""
    params = ENV.make_params(seed=1)
    state, _ = ENV.reset(jax.random.PRNGKey(0), params)
    actor = P.candidate_actor(ENV, params, _policy_fn)
    rec = P.Recorder(init=lambda: jnp.zeros((ENV.max_turns,), jnp.int32),
                     update=lambda r, t, choice, turn: r.at[t].set(choice.index + 1))
    for cap in (2, ENV.max_turns):
        out = jax.jit(lambda s, k: P.play_from(ENV, params, actor, s, k, cap, 0.5, rec))(
            state, jax.random.PRNGKey(7))
        s, key, g, tok, picks = state, jax.random.PRNGKey(7), 0.5, 0.0, []
        for _ in range(cap):
            key, sub = jax.random.split(key)
            choice, _ = actor.act(s, sub, ())
            s, ts = ENV.step(s, choice.response, params)
            g, tok = g + float(ts.reward), tok + float(choice.tokens)
            picks.append(int(choice.index) + 1)
            if bool(ts.done):
                break
        assert int(out.calls) == len(picks) and bool(out.done) == bool(ts.done)
        np.testing.assert_allclose([float(out.ret), float(out.tokens)], [g, tok], rtol=1e-6)
        assert list(np.asarray(out.rec)[:len(picks)]) == picks
        assert int(out.state.node) == int(s.node)


def test_play_from_a_done_state_takes_no_turn():
    params = ENV.make_params(seed=1)
    state, _ = ENV.reset(jax.random.PRNGKey(0), params)
    for _ in range(ENV.max_turns):
        cands, legal = ENV.legal_actions(state, params)
        state, _ = ENV.step(state, cands[int(np.argmax(np.asarray(legal)))], params)
    assert bool(P.state_done(ENV, state, params))
    out = P.play_from(ENV, params, _policy_fn, state, jax.random.PRNGKey(0), 5)
    assert int(out.calls) == 0 and float(out.ret) == 0.0 and out.rec == ()


def test_step_turn_subtracts_the_penalty_and_sends_env_actions():
    params = ENV.make_params(seed=2)
    state, _ = ENV.reset(jax.random.PRNGKey(0), params)
    cands, _ = ENV.legal_actions(state, params)
    plain = P.step_turn(ENV, params, state, P.Choice(response=cands[1], index=jnp.int32(1)))
    assert float(plain.penalty) == 0.0 and int(plain.state.node) == 2
    written = P.Choice(response=jnp.zeros((7,), jnp.int32), index=jnp.int32(-1),
                       env_actions=cands[1], penalty=jnp.float32(0.1))
    turn = P.step_turn(ENV, params, state, written)
    assert int(turn.state.node) == 2 and float(turn.penalty) == np.float32(0.1)


def test_turn_record_is_the_same_on_numpy_and_jnp():
    rng = np.random.default_rng(0)
    n, a, k = 3, 4, 2
    args = dict(live=np.array([True, True, False]), obs=rng.integers(0, 9, (n, 5)),
                feedback=rng.integers(0, 9, (n, 2)), responses=rng.integers(0, 9, (n, a)),
                index=np.array([1, -1, 0]), scored=rng.random((n, a)) < 0.5,
                logp=rng.normal(size=(n, a)).astype(np.float32),
                value=rng.normal(size=n).astype(np.float32),
                reward=np.array([1.0, 0.5, 2.0], np.float32),
                penalty=np.array([0.0, 0.1, 0.3], np.float32),
                done=np.array([True, False, True]), cands=rng.integers(0, 9, (n, k, a)),
                legal=rng.random((n, k)) < 0.5, costs=rng.random((n, k)).astype(np.float32),
                acted=np.array([True, False, False]))
    host = P.turn_record(**args, xp=np)
    jit = P.turn_record(**{key: jnp.asarray(v) for key, v in args.items()})
    assert set(host) == set(P.RECORD) - {"states"}
    for key in host:
        np.testing.assert_array_equal(host[key], np.asarray(jit[key]), err_msg=key)
    np.testing.assert_array_equal(host["action_index"], [1, -1, -1])
    np.testing.assert_allclose(host["rewards"], [1.0, 0.4, 0.0], rtol=1e-6)
    # the penalty is kept beside the reward on the live episodes (r_t + p_t = env reward)
    np.testing.assert_allclose(host["penalties"], [0.0, 0.1, 0.0], rtol=1e-6)
    assert not host["token_mask"][1:].any() and list(host["dones"]) == [True, False, False]


def test_play_records_the_penalty_beside_the_reward_it_lowers():
    """A chooser that penalises its odd candidates: play records p_t = 0.1 on those live
    turns (0 elsewhere and after done) and rewards = the penalty-free play's - p_t."""
    params = ENV.make_params(seed=3)

    def chooser(pen):
        def choose(key, states, ts, cands, legal, costs):
            c = P.uniform_chooser(key, states, ts, cands, legal, costs)
            return c.replace(penalty=jnp.where(c.index % 2 == 1, pen, 0.0))
        return choose

    run = lambda pen: P.play(ENV, params, chooser(pen), jax.random.PRNGKey(4), 3, 2)  # noqa
    eps, plain = run(0.1), run(0.0)
    rec, live = eps.record, np.asarray(eps.record["turn_mask"])
    np.testing.assert_array_equal(rec["action_index"], plain.record["action_index"])
    odd = live & (np.asarray(rec["action_index"]) % 2 == 1)
    assert odd.any() and (live & ~odd).any()
    np.testing.assert_allclose(rec["penalties"], np.where(odd, 0.1, 0.0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(rec["rewards"]) + np.asarray(rec["penalties"]),
                               plain.record["rewards"], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(plain.record["penalties"], 0.0)


def test_sample_candidate_stays_legal_and_falls_back_when_none_is():
    logp = jnp.array([5.0, 0.0, -1.0])
    legal = jnp.array([False, True, True])
    picks = jax.vmap(lambda k: P.sample_candidate(k, logp, legal))(
        jax.random.split(jax.random.PRNGKey(0), 64))
    assert set(np.asarray(picks).tolist()) <= {1, 2}
    none = P.sample_candidate(jax.random.PRNGKey(1), logp, jnp.zeros(3, bool))
    assert 0 <= int(none) < 3
