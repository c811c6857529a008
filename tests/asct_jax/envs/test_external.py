"""Host adapters for real text games: TextWorld, ScienceWorld, ALFWorld, WebShop.

TextWorld games are generated once into ~/.cache/asct_jax/textworld (or
$ASCT_JAX_TEXTWORLD_GAMES) with experiments/harness/make_textworld_games.py (~1-3 s a game).
"""
import dataclasses
import os
import pickle
import signal
import time

import numpy as np
import pytest

from asct_jax.envs.external import (AlfWorldEnv, BatchedHostEnv, HostState, ScienceWorldEnv,
                                    TextWorldEnv, WebShopEnv, encode, make_host_env)
from experiments.harness.make_textworld_games import DEFAULT_OUT, make_games

SW_TASK = "find-non-living-thing"  # variation 0, "easy": solved in 5 steps
SW_ACTIONS = ["open door to kitchen", "xyzzy", "go to kitchen", "look around",
              "focus on drawer in counter", "move drawer in counter to red box"]


@pytest.fixture(scope="module")
def tw_games():
    out = os.environ.get("ASCT_JAX_TEXTWORLD_GAMES", DEFAULT_OUT)
    return make_games(3, out=out, go=6)


def _play(env, state, actions):
    """Step through actions; return the states, timesteps and legal actions after each."""
    states, steps, legal = [], [], []
    for a in actions:
        state, ts = env.step(state, a)
        states.append(state)
        steps.append(ts)
        legal.append(env.legal_actions(state))
    return states, steps, legal


def _tw_actions(env, state):
    wt = env.walkthrough(state)
    return wt[:2] + ["xyzzy", "look"] + wt[2:]  # an unknown command is an ordinary step


@pytest.mark.slow
def test_textworld_episode(tw_games):
    env = TextWorldEnv(tw_games, max_turns=40)
    state, ts = env.reset(0)
    assert state.game == tw_games[0] and not ts.done and ts.feedback == ""
    assert set(ts.info) == {"success", "score", "max_score"}
    assert env.walkthrough(state)[0] in env.legal_actions(state)
    states, steps, _ = _play(env, state, _tw_actions(env, state))
    assert all(set(t.info) == set(ts.info) for t in steps)
    assert not steps[2].done and steps[2].reward == 0.0 and steps[2].feedback
    assert steps[-1].done and steps[-1].info["success"] == 1.0
    assert sum(t.reward for t in steps) == steps[-1].info["score"] == ts.info["max_score"]
    last, ts2 = env.step(states[-1], "look")  # absorbing
    assert last == states[-1] and ts2.reward == 0.0 and ts2.done and ts2.info == steps[-1].info
    assert env.legal_actions(last) == []
    short = TextWorldEnv(tw_games, max_turns=2)
    s, _ = short.reset(0)
    s, _ = short.step(s, "look")
    s, t = short.step(s, "look")
    assert t.done and s.done and t.info["success"] == 0.0


@pytest.mark.slow
def test_textworld_restore_at_k_equals_original(tw_games):
    env = TextWorldEnv(tw_games)
    state0, _ = env.reset(1)
    actions = _tw_actions(env, state0)
    states, steps, legal = _play(env, state0, actions)
    for k in (1, 3, len(actions) - 2):
        env.restore(states[k - 1])
        assert env.legal_actions(states[k - 1]) == legal[k - 1]
        _, steps_k, legal_k = _play(env, states[k - 1], actions[k:])
        assert steps_k == steps[k:] and legal_k == legal[k:]
    assert env.stats["native_restores"] >= 3 and env.stats["replays"] == 0
    # A pickled state continues the same way in a fresh adapter (native blob), and by replay.
    k = 3
    kept = pickle.loads(pickle.dumps(states[k - 1]))
    for fresh, st in [(TextWorldEnv(tw_games), kept),
                      (TextWorldEnv(tw_games), dataclasses.replace(kept, native=None))]:
        fresh.restore(st)
        _, steps_k, legal_k = _play(fresh, st, actions[k:])
        assert steps_k == steps[k:] and legal_k == legal[k:]
    assert fresh.stats["replays"] == 1


@pytest.mark.slow
def test_batched_textworld(tw_games):
    batch = BatchedHostEnv([TextWorldEnv(tw_games) for _ in range(3)])
    states, steps = batch.reset([0, 1, 2])
    assert [s.game for s in states] == tw_games and len(steps) == 3
    legal = batch.legal_actions(states)
    assert all(len(cmds) > 0 for cmds in legal)
    actions = [cmds[0] for cmds in legal]
    states2, steps2 = batch.step(states, actions)
    assert [s.turn for s in states2] == [1, 1, 1]
    single = TextWorldEnv(tw_games)  # the batch equals the games played one by one
    for i in range(3):
        s, _ = single.reset(i)
        assert single.step(s, actions[i])[1] == steps2[i]
    with pytest.raises(ValueError, match="one per environment"):
        batch.step(states2, actions[:2])


def test_encode_left_truncates_and_pads():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "a": 2, "b": 3, "c": 4, "d": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>")
    out = encode(["a b c d", "b", ""], tok, 3)
    assert out.dtype == np.int32 and out.shape == (3, 3)
    np.testing.assert_array_equal(out, [[3, 4, 5], [3, 0, 0], [0, 0, 0]])


@pytest.fixture(scope="module")
def sw_reference():
    """An uninterrupted ScienceWorld run: states, steps, legal actions."""
    env = ScienceWorldEnv(SW_TASK, variations=[0], legal_cache_size=0)  # replay, not cache
    state0, ts0 = env.reset(0)
    states, steps, legal = _play(env, state0, SW_ACTIONS)
    yield env, state0, states, steps, legal
    env.close()


@pytest.mark.slow
def test_scienceworld_replay_reaches_same_observation_and_score(sw_reference):
    env, state0, states, steps, legal = sw_reference
    assert steps[-1].done and steps[-1].info == {"success": 1.0, "score": 100.0}
    assert steps[1].feedback and steps[1].reward == 0.0  # unknown command: ordinary step
    k = 3
    env.restore(states[k - 1])  # reset + replay of the prefix
    assert env.stats["replays"] == 1 and env.stats["replayed_steps"] == k
    env.restore(states[k + 1])  # from an earlier state of the episode: the 2 missing steps
    assert env.stats["forward_replays"] == 1 and env.stats["replayed_steps"] == k + 2
    assert env.legal_actions(states[k + 1]) == legal[k + 1]
    env.restore(states[k - 1])  # back: reset + replay again
    assert env.stats["replays"] == 2
    _, steps_k, legal_k = _play(env, states[k - 1], SW_ACTIONS[k:])
    assert steps_k == steps[k:] and legal_k == legal[k:]
    assert steps_k[-1].observation == steps[-1].observation
    assert steps_k[-1].info["score"] == steps[-1].info["score"] == 100.0


@pytest.mark.slow
def test_scienceworld_survives_killed_java(sw_reference):
    _, _, _, ref_steps, _ = sw_reference
    env = make_host_env("scienceworld", task=SW_TASK, variations=[0])
    try:
        state, _ = env.reset(0)
        states, steps, _ = _play(env, state, SW_ACTIONS[:3])
        pid = env.java_pid
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):  # wait until the process is gone
            if env._sw._gateway.java_process.poll() is not None:
                break
            time.sleep(0.05)
        _, rest, _ = _play(env, states[-1], SW_ACTIONS[3:])
        assert env.stats["restarts"] == 1 and env.java_pid != pid
        assert steps + rest == ref_steps
    finally:
        env.close()


def test_alfworld_and_webshop_without_data_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        AlfWorldEnv(data_path=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="WebShop data not found.*setup.sh"):
        WebShopEnv(data_path=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="ALFWorld data not found"):
        make_host_env("alfworld", data_path=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="Unknown host environment 'nethack'"):
        make_host_env("nethack")


@pytest.mark.slow
def test_host_state_is_small_and_picklable(tw_games):
    env = TextWorldEnv(tw_games)
    state, _ = env.reset(2)
    state, _ = env.step(state, "look")
    back = pickle.loads(pickle.dumps(state))
    assert back == state and back.native == state.native and isinstance(back, HostState)
    assert len(state.native) < 200_000
