"""experiments/harness/tuning.py: a sweep point's score, the choice, the run length, and how a
table applies the tuned values."""
import pytest

from asct_jax.infra.checks import ConfigError
from experiments.configs import asct_ragspace, base, factor_generate, factor_table
from experiments.harness import tuning


def test_score_is_the_mean_over_the_last_quarter_of_the_evaluations():
    steps = [0, 5, 10, 15, 20, 25, 30, 35, 40]
    values = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.9]
    # the last quarter: steps >= 30 -> 0.6, 0.7, 0.9
    assert tuning.score(steps, values) == pytest.approx((0.6 + 0.7 + 0.9) / 3)
    assert tuning.score([0, 20], [0.1, 0.3]) == pytest.approx(0.3)   # the last one at least
    with pytest.raises(ValueError):
        tuning.score([], [])


def test_choose_takes_the_best_score_and_of_a_tie_the_smaller_rate():
    points = {"a": ({"ppo.lr": 1e-3}, 0.5), "b": ({"ppo.lr": 1e-4}, 0.5),
              "c": ({"ppo.lr": 3e-4}, 0.4)}
    assert tuning.choose(points) == "b"
    points["c"] = ({"ppo.lr": 3e-4}, 0.6)
    assert tuning.choose(points) == "c"


def test_run_length_is_where_the_last_quarter_flattens_and_stays_flat():
    steps = list(range(0, 65, 5))
    # rises by 0.1 per evaluation up to step 30, then constant
    values = [min(s, 30) / 50 for s in steps]
    # up to 30 the last 4 evaluations lie on the line (SE 0, slope 0.02 > 0): not flat; at
    # 35 (0.4, 0.5, 0.6, 0.6: slope 0.014 +- 0.0149) and at 40 the interval covers 0, from
    # 45 on the tail is constant (slope 0 +- 0)
    length, test = tuning.run_length(steps, values, every=5, min_steps=20, cap=60,
                                     min_points=4)
    assert length == 35 and test["flat"] and test["lo"] < 0 < test["hi"]
    rising = [s / 100 for s in steps]
    length, test = tuning.run_length(steps, rising, every=5, min_steps=20, cap=60,
                                     min_points=4)
    assert length == 60 and not test["flat"]      # never flat: the cap
    # a pause (flat 20..35) and then a rise: not cut at the pause
    pause = [min(s, 20) / 50 + max(s - 35, 0) / 50 for s in steps]
    length, test = tuning.run_length(steps, pause, every=5, min_steps=20, cap=60,
                                     min_points=4)
    assert length == 60 and not test["flat"]


def test_six_evaluations_see_a_noisy_rise_that_four_cannot():
    """Seed 7's GRPO shop validation curve at lr 4e-4 (every 5 steps, 512 episodes): it
    rises 0.459 -> 0.502 over steps 20-60, but each 4-point window's slope interval covers
    0 (2 degrees of freedom), so the 4-point rule cuts it at 20; the default 6 does not."""
    steps = list(range(0, 65, 5))
    values = [0.420, 0.436, 0.445, 0.430, 0.459, 0.467, 0.471, 0.469, 0.463, 0.486, 0.494,
              0.486, 0.502]
    assert tuning.run_length(steps, values, 5, 20, 60, min_points=4)[0] == 20
    length, test = tuning.run_length(steps, values, 5, 20, 60)
    assert length == 60 and not test["flat"] and test["lo"] > 0
    flat = [0.420, 0.418, 0.439, 0.459, 0.463, 0.469, 0.463, 0.465, 0.471, 0.459, 0.465,
            0.469, 0.471]                           # the same at lr 1e-4: flat from 35
    assert tuning.run_length(steps, flat, 5, 20, 60)[0] == 35


def test_lr_grid_is_a_log_grid_around_the_tables_rate():
    grid = tuning.lr_grid(1e-4, base.get_config().sweep.lr_factors)
    assert grid[0] == pytest.approx(2.5e-5) and grid[-1] == pytest.approx(8e-4)
    assert 1e-4 in grid and len(grid) >= 5
    assert tuning.log_spaced(grid) and not tuning.log_spaced([1.0, 2.0, 3.0])


def test_point_names_carry_each_overridden_value():
    assert tuning.point_name("shop", "factor", {"ppo.lr": 5e-05, "factor.kl_coef": 0.1}) == \
        "shop_factor_lr5e-05_kl_coef0.1"


def test_the_authors_protocol_changes_nothing_and_an_untuned_method_is_an_error():
    c = factor_table.get_config("quick_warm")
    assert c.table.protocol == "authors" and tuning.tuned_overrides(c.table, "shop", "factor") == {}
    tuned = factor_table.get_config("quick_warm_tuned")
    assert tuned.train.experiment == "factor_table_quick_warm_tuned"
    assert tuned.train.eval_every == 5
    base.set_tuned(tuned, {}, 0, {})
    with pytest.raises(ConfigError, match="table.tuned.shop.factor"):
        tuning.tuned_overrides(tuned.table, "shop", "factor")


def test_tuned_overrides_give_the_chosen_values_the_run_length_and_the_options():
    c = factor_table.get_config("quick_warm_tuned")
    base.set_tuned(c, {"shop": {"factor": {"ppo.lr": 2e-4, "factor.kl_coef": 0.1},
                                "grpo": {"ppo.lr": 4e-4}}}, 40,
                   {"factor": {"factor.eta0": 0.5}})
    over = tuning.tuned_overrides(c.table, "shop", "factor_no_tac")   # FACTOR's values
    assert over == {"ppo.lr": 2e-4, "factor.kl_coef": 0.1, "factor.eta0": 0.5,
                    "train.steps": 40}
    assert tuning.tuned_overrides(c.table, "shop", "grpo_extended") == \
        {"ppo.lr": 4e-4, "train.steps": 40}
    c.table.protocol = "other"
    with pytest.raises(ConfigError, match="table.protocol"):
        tuning.tuned_overrides(c.table, "shop", "grpo")


def test_a_run_length_per_analogue_is_each_analogues_own():
    c = factor_table.get_config("quick_warm_tuned")
    base.set_tuned(c, {e: {"grpo": {"ppo.lr": 4e-4}} for e in ("shop", "science", "household")},
                   {"shop": 60, "science": 40}, {})
    assert tuning.tuned_overrides(c.table, "shop", "grpo")["train.steps"] == 60
    assert tuning.tuned_overrides(c.table, "science", "grpo")["train.steps"] == 40
    with pytest.raises(ConfigError, match="run length of household"):
        tuning.tuned_overrides(c.table, "household", "grpo")
    base.set_tuned(c, {"shop": {"grpo": {"ppo.lr": 4e-4}}}, 30, {})   # and back to one length
    assert tuning.tuned_overrides(c.table, "shop", "grpo")["train.steps"] == 30


def test_every_decision_table_config_has_the_tuned_protocol():
    for module, arg in ((factor_table, "quick_warm_tuned"), (factor_generate, "quick_warm_tuned"),
                        (asct_ragspace, "quick_warm_tuned")):
        c = module.get_config(arg)
        assert c.table.protocol == "tuned" and c.train.experiment.endswith("_tuned")
        assert module.get_config(arg[:-len("_tuned")]).table.protocol == "authors"
