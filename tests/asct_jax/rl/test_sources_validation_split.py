"""train.eval_split (issue 49): "validation" held-out episodes differ from the "test" ones
the tables report (another key; an env with a question split plays its "val" split), a
stored run of before the field reads as "test", host games refuse "validation".

Integration test (asct_jax.rl.run_config, sources and host_games, asct_jax.envs' play and
questions), kept under its entry point: the held-out environment of asct_jax.rl.sources."""
import dataclasses
import json

import jax
import ml_collections
import numpy as np
import pytest

from asct_jax.envs.play import group_reset_keys, reset_batch
from asct_jax.envs.questions import evaluation_question_ids
from asct_jax.infra.checks import ConfigError
from asct_jax.rl.host_games import GameSet, HostGames
from asct_jax.rl.run_config import TrainConfig, run_config
from asct_jax.rl.sources import JaxEnvSource
from experiments.configs import base


def _config(env: str, eval_split: str = "test"):
    c = base.get_config()
    c.env.name = env
    c.train.eval_split = eval_split
    return c


def test_the_held_out_key_is_eval_seed_for_test_and_validation_seed_for_validation():
    test = run_config(_config("shop")).train
    val = run_config(_config("shop", "validation")).train
    assert (test.eval_split, test.held_out_seed) == ("test", test.eval_seed)
    assert val.held_out_seed == val.validation_seed != val.eval_seed


def test_bad_eval_split_and_a_validation_seed_equal_to_eval_seed_are_config_errors():
    with pytest.raises(ConfigError, match="train.eval_split"):
        run_config(_config("shop", "dev"))
    c = _config("shop", "validation")
    c.train.validation_seed = c.train.eval_seed
    with pytest.raises(ConfigError, match="train.validation_seed"):
        run_config(c)
    c.train.eval_split = "test"                 # not read under "test"
    assert run_config(c).train.held_out_seed == c.train.eval_seed


def _first_observation(source):
    """Observation [O] of the first held-out episode, reset as make_eval's rollout resets
    it (asct_jax.envs.play.play: split(key) -> reset key -> group_reset_keys)."""
    env, params = source.held_out
    reset_key, _ = jax.random.split(jax.random.key(source.run.train.held_out_seed))
    keys = group_reset_keys(reset_key, 2, 1)
    _, ts = reset_batch(env, params, keys, evaluation_question_ids(env, params, 2))
    return np.asarray(ts.observation[0])


@pytest.mark.parametrize("env", ["shop", "household"])
def test_an_env_without_a_question_split_draws_other_validation_tasks(env):
    test, val = JaxEnvSource(_config(env)), JaxEnvSource(_config(env, "validation"))
    assert val.held_out == (val.env, val.env_params)        # the training environment
    assert not np.array_equal(_first_observation(test), _first_observation(val))
    assert test.summary_extra()["eval_split"] == "test"
    assert val.summary_extra() == {"env": env, "eval_split": "validation",
                                   "eval_key_seed": val.run.train.validation_seed}


def test_ragspace_validation_plays_the_val_questions_whatever_eval_options_say():
    c = _config("ragspace", "validation")
    c.env.eval_options = ml_collections.ConfigDict({"split": "test"})
    c.train.eval_episodes = 16
    val, test = JaxEnvSource(c), JaxEnvSource(_config("ragspace"))
    c.train.eval_split = "test"
    reported = JaxEnvSource(c)
    p = val.env_params
    env, params = val.held_out
    assert (val.env_params.split, params.split, reported.held_out[1].split) == (
        "train", "val", "test")
    qids = np.asarray(evaluation_question_ids(env, params, 16))
    assert qids.min() >= p.n_train and qids.max() < p.n_train + p.n_val   # the val range
    test_qids = np.asarray(evaluation_question_ids(*reported.held_out, 16))
    assert not set(qids) & set(test_qids)
    # no eval_options (held out on the training split): validation still plays "val"
    assert test.held_out == (test.env, test.env_params)
    no_options = JaxEnvSource(_config("ragspace", "validation"))
    assert no_options.held_out[1].split == "val"
    assert val.summary_extra() == {
        "env": "ragspace", "eval_split": "validation",
        "eval_key_seed": val.run.train.validation_seed,
        "eval_questions": [p.n_train, p.n_train + 16], "eval_question_split": "val"}
    first_val, first_test = _first_observation(val), _first_observation(reported)
    assert not np.array_equal(first_val, first_test)


def test_host_games_refuse_validation_in_one_line():
    games = GameSet(name="scienceworld", settings=None, make_train=None, make_eval=None,
                    num_train=1, num_eval=1)
    with pytest.raises(ConfigError, match="train.eval_split") as e:
        HostGames(run_config(_config("shop", "validation")), games)
    assert "\n" not in str(e.value)


def test_a_stored_run_without_the_fields_reads_as_a_test_evaluation(tmp_path):
    from experiments.configs import factor_table
    from experiments.harness import registry
    from experiments.harness.runner import config_differences

    c = factor_table.get_config("quick")
    c.train.results_dir = str(tmp_path)
    stored = json.loads(json.dumps(registry.check(c)[1].record))   # its config.json
    for field in ("eval_split", "validation_seed"):
        del stored["train"][field]
    assert config_differences(stored, c) == []
    c.train.eval_split = "validation"
    assert config_differences(stored, c) == ["train.eval_split"]


def test_train_config_default_is_what_stored_runs_did():
    fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert fields["eval_split"] == "test"
    assert base.get_config().train.validation_seed == fields["validation_seed"]
