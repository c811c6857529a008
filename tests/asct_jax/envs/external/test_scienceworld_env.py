"""ScienceWorld as a rollout source (issue 24): the candidate rule (fast, synthetic), and
on the real simulator (slow): games over several tasks, the success reward, the gold path
in admissible spelling, the warm start's forced expert turns, the generation parse, and
the one-step smoke run of scienceworld_run."""
import collections
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asct_jax.envs.external.command_rules import (KEEP_VERBS, VerbQuotaRule, object_words,
                                                  verb_of)

TASK = ("Your task is to find a(n) non-living thing. First, focus on the thing. Then, move "
        "it to the red box in the kitchen.")


def _commands(n_move=40, n_focus=12):
    objs = [f"thing {i}" for i in range(n_move)]
    return (["go to kitchen", "go to hallway", "look around", "inventory", "wait1"]
            + [f"focus on {o}" for o in objs[:n_focus]]
            + [f"move {o} to {dst}" for o in objs for dst in ("red box", "table")]
            + ["open door to kitchen", "pick up thing 3", "read book"])


def test_verb_of_and_object_words():
    assert verb_of("focus on cup") == "focus on"
    assert verb_of("go to kitchen") == "go to"
    assert verb_of("look around") == "look around" and verb_of("look at cup") == "look at"
    assert verb_of("move cup to red box") == "move"
    assert object_words("focus on red box") == {"red", "box"}


def test_rule_keeps_navigation_quotas_and_relevance():
    cmds = _commands()
    rule = VerbQuotaRule(24, seed=0)
    kept = rule(cmds, TASK, "find-non-living-thing:0", 0)
    assert len(kept) == 24 and len(set(kept)) == 24
    assert kept == [c for c in cmds if c in kept]           # the game's order
    for c in cmds:                                           # navigation whole
        if verb_of(c) in KEEP_VERBS:
            assert c in kept
    verbs = collections.Counter(verb_of(c) for c in kept)
    assert verbs["move"] > verbs["focus on"] >= 1 and verbs["read"] == 1   # sqrt quotas
    moves = [c for c in kept if verb_of(c) == "move"]
    assert all(c.endswith("red box") for c in moves)         # task-relevant objects first
    assert rule(cmds, TASK, "find-non-living-thing:0", 0) == kept          # deterministic
    assert rule(cmds, TASK, "find-non-living-thing:0", 1) != kept          # seeded per turn
    assert rule(cmds[:10], TASK) == cmds[:10]                # fewer than K: all of them
    with pytest.raises(ValueError, match="max_candidates"):
        VerbQuotaRule(0)


@settings(max_examples=50, deadline=None)
@given(n_move=st.integers(0, 30), n_focus=st.integers(0, 30), k=st.integers(1, 60),
       turn=st.integers(0, 5))
def test_rule_keeps_min_k_n_distinct_commands(n_move, n_focus, k, turn):
    cmds = _commands(n_move, min(n_focus, n_move))
    kept = VerbQuotaRule(k)(cmds, TASK, "g", turn)
    assert len(kept) == min(k, len(cmds))
    assert set(kept) <= set(cmds) and len(set(kept)) == len(kept)


# ----------------------------------------------------------------------------- real games

@pytest.fixture(scope="module")
def sw_env():
    pytest.importorskip("scienceworld")
    from asct_jax.envs.external.scienceworld_env import ScienceWorldEnv

    env = ScienceWorldEnv(("find-non-living-thing", "find-plant"), split="train",
                          num_variations=2, max_turns=40)
    yield env
    env.close()


@pytest.mark.slow
def test_games_interleave_tasks_and_reward_is_success(sw_env):
    assert sw_env.games[:4] == ["find-non-living-thing:0", "find-plant:0",
                                "find-non-living-thing:1", "find-plant:1"]
    state, _ = sw_env.reset(0)
    rewards = []
    for cmd in ["go to kitchen", "focus on cup containing nothing in table",
                "move cup containing nothing in table to red box"]:
        state, ts = sw_env.step(state, cmd)
        rewards.append(ts.reward)
    assert rewards == [0.0, 0.0, 1.0] and state.won and ts.info == {"success": 1.0,
                                                                    "score": 100.0}
    state, _ = sw_env.reset(1)   # find-plant: a wrong focus fails (score -100, counted 0)
    state, ts = sw_env.step(state, "focus on agent")
    assert ts.done and not state.won and ts.reward == 0.0 and ts.info["score"] == 0.0


@pytest.mark.slow
def test_gold_path_is_admissible_and_wins(sw_env):
    from asct_jax.envs.external.scienceworld_gold import admissible_gold_path

    g = admissible_gold_path(sw_env, 1)          # find-plant:0: no-op and respelled steps
    assert g.game == "find-plant:0" and g.won
    assert g.noop >= 1 and g.respelled >= 1 and g.unmatched == 0
    assert len(g.commands) == len(g.gold) - g.noop - g.after_done
    state, _ = sw_env.reset(1)
    for c in g.commands:                         # every step in the valid list
        assert c in sw_env.legal_actions(state)
        state, _ = sw_env.step(state, c)
    assert state.won
    hits = sw_env.stats["legal_hits"]
    sw_env.legal_actions(state.__class__(game=state.game, seed=99))  # another seed, same game
    assert sw_env.stats["legal_hits"] == hits + 1   # cached per (game, action prefix)


@pytest.mark.slow
def test_generation_parse_on_the_simulator(sw_env):
    from asct_jax.envs.external.scienceworld_env import is_unknown_command
    from asct_jax.envs.projection import project

    state, _ = sw_env.reset(0)
    state, _ = sw_env.step(state, "go to kitchen")
    legal = sw_env.legal_actions(state)
    action, valid = project("<think>a cup is not alive</think><action> Focus on "
                            "cup containing nothing in table </action>", legal)
    assert valid and action == "focus on cup containing nothing in table"
    _, ts = sw_env.step(state, action)
    assert not is_unknown_command(ts.feedback)
    action, valid = project("I would dance with the cup", legal)    # no tags
    assert not valid and action == "i would dance with the cup"[-30:]
    _, ts = sw_env.step(state, action)
    assert is_unknown_command(ts.feedback) and ts.reward == 0.0


@pytest.mark.slow
def test_smoke_run_trains_each_method_and_warm_start_forces_gold(tmp_path):
    pytest.importorskip("scienceworld")
    from experiments.configs import scienceworld as cfg
    from experiments.tables import scienceworld_run

    config = cfg.get_config("smoke")
    config.train.results_dir = str(tmp_path)
    scienceworld_run.main(config)
    out = tmp_path / "scienceworld_smoke"
    paths = json.loads((out / "gold_paths.json").read_text())
    assert len(paths) == 2 and all(p["won"] for p in paths)
    ws = json.loads((out / "warm_start" / "summary.json").read_text())
    assert ws["expert_turns"] == sum(min(len(p["commands"]), 6) for p in paths)
    assert ws["sft_loss_last"] < ws["sft_loss_first"]
    table = json.loads((out / "table.json").read_text())
    assert set(table) == {"grpo", "serl", "factor"}
    calls = {m: table[m]["env calls"][0] for m in table}
    assert calls["factor"] > calls["grpo"]      # TAC's continuations are counted
    comparisons = json.loads((out / "comparisons.json").read_text())
    assert comparisons["rows"] == []            # one seed: no paired comparison yet
    assert set(comparisons["seeds"]) == {"grpo", "serl", "factor"}
    timing = json.loads((out / "timing.json").read_text())
    assert set(timing) >= {"gold_paths_s", "warm_start_s", "runs_s"}
    assert np.isfinite(list(timing["runs_s"].values())).all()


@pytest.mark.slow
def test_host_rollout_of_a_generating_actor(tmp_path):
    """The actor writes its turn on the real simulator: prompts kept, action tokens inside
    the response, invalid steps penalised and sent as written (the simulator parses them),
    and the warm start's forced turns written in the canonical form."""
    pytest.importorskip("scienceworld")
    import jax
    import jax.numpy as jnp

    from asct_jax.rl.host_games import HostGames
    from asct_jax.rl.host_warm_start import expert_rollout
    from asct_jax.rl.build import build_policy
    from asct_jax.rl.types import action_tokens, nonaction_tokens
    from experiments.configs import scienceworld as cfg
    from experiments.tables import scienceworld_run

    config = cfg.get_config("smoke")
    config.train.results_dir = str(tmp_path)
    config.actor.chooser = "generate"
    config.scienceworld.max_turns = 3
    games = scienceworld_run.game_set(config)
    source = HostGames(config, games)
    try:
        policy, params = build_policy(config, source.vocab_size, source.shape, source.prompt)
        assert policy.chooser == "generate"
        from asct_jax.rl.host_rollout import host_rollout
        batch, _ = host_rollout(policy, params, source.train_env, source.tokenizer, [0],
                                source.host_shape, group_size=2, key=jax.random.key(0),
                                encoder=source.encoder, select=games.select)
        b, t, r = batch.responses.shape
        assert r == config.actor.response_len and batch.prompts.shape[:2] == (b, t)
        act, non = action_tokens(batch), nonaction_tokens(batch)
        assert not jnp.any(act & non) and jnp.all((act | non) == batch.token_mask)
        invalid = batch.turn_info["gen/invalid"]
        assert jnp.all(jnp.where(batch.turn_mask, (invalid == 0) | (invalid == 1), True))
        # a random actor writes no valid action: every real turn is penalised by 0.1
        assert float(jnp.sum(invalid)) == float(jnp.sum(batch.turn_mask)) > 0
        np.testing.assert_allclose(np.asarray(batch.rewards)[np.asarray(batch.turn_mask)],
                                   -0.1, atol=1e-6)

        paths = {0: ["go to kitchen", "look around"]}
        data, expert = expert_rollout(policy, params, source, paths, jax.random.key(1))
        assert np.asarray(expert)[:, :2].all() and not np.asarray(expert)[:, 2:].any()
        assert np.all(np.asarray(data.turn_info["gen/invalid"])[:, :2] == 0.0)
        words = [source.tokenizer.decode([int(i)]) for i in
                 np.asarray(data.responses)[0, 0][np.asarray(action_tokens(data))[0, 0]]]
        assert " ".join(words) == "go to kitchen"
    finally:
        source.close()
