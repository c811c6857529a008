"""ScienceWorld as a rollout source (issue 24) on the real simulator (slow): games over
several tasks, the success reward, the gold path in admissible spelling, the warm start's
forced expert turns, the generation parse, and the one-step smoke run of scienceworld_run.
The candidate rule (fast, synthetic): tests/asct_jax/envs/external/test_command_rules.py."""
import json

import numpy as np
import pytest


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
    from tests.helpers.scienceworld import is_unknown_command
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
