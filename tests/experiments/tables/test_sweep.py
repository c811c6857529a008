"""experiments/tables/sweep.py: a table's method tuned end to end on the tuning seed's
validation episodes, its points reused when the sweep runs again."""
import json
import os

import pytest

from experiments.configs import base, factor_table
from experiments.harness.dotted import apply_overrides
from experiments.tables import sweep


def _config(tmp_path):
    c = base.use_test_model(factor_table.get_config("smoke"))
    return apply_overrides(c, {
        "train.results_dir": str(tmp_path), "train.progress": False,
        "train.eval_episodes": 8, "rollout.num_groups": 2, "rollout.group_size": 2,
        "sweep.methods": ("grpo",), "sweep.envs": ("shop",), "sweep.lr_factors": (1.0, 2.0),
        "sweep.steps": 4, "sweep.min_steps": 3, "sweep.eval_every": 1,
        "sweep.edge_extensions": 0})


def test_sweep_config_evaluates_on_validation_at_the_tuning_seeds_scale(tmp_path):
    c = sweep.sweep_config(_config(tmp_path))
    assert c.train.eval_split == "validation" and c.train.steps == 4
    assert c.train.eval_every == 1
    with pytest.raises(Exception, match="sweep.methods"):
        sweep._names(apply_overrides(c, {"sweep.methods": ("factor_no_tac",)}))
    with pytest.raises(Exception, match="unknown credit method 'nope'"):
        sweep._names(apply_overrides(c, {"sweep.methods": ("grpo,nope",)}))
    # the command line's "grpo,factor" arrives as one string
    assert sweep._names(apply_overrides(c, {"sweep.methods": ("grpo,factor",),
                                            "sweep.envs": ("shop,science",)})) == \
        (["grpo", "factor"], ["shop", "science"])


@pytest.mark.slow
def test_a_sweep_trains_each_point_writes_its_choice_and_reuses_finished_points(tmp_path):
    c = _config(tmp_path)
    sweep.main(c)
    out = tmp_path / "sweep_factor_table_smoke"
    result = json.loads((out / "shop_grpo_tuning.json").read_text())
    assert set(result["points"]) == {"shop_grpo_lr0.01", "shop_grpo_lr0.02"}
    assert result["split"] == "validation" and result["seed"] == base.TUNING_SEED
    for name, p in result["points"].items():
        assert p["steps"] == [0, 1, 2, 3, 4]
        summary = json.loads((out / f"{name}_s7" / "summary.json").read_text())
        assert summary["eval_split"] == "validation"
    assert result["chosen"] in [p["overrides"] for p in result["points"].values()]
    table = json.loads((out / "shop_tuning.json").read_text())
    assert table["best_method"] == "grpo" and 3 <= table["run_length"] <= 4
    assert os.path.exists(out / "shop_validation.png")
    stamp = os.path.getmtime(out / "shop_grpo_lr0.01_s7" / "summary.json")
    sweep.main(c)                                   # finished points are not trained again
    assert os.path.getmtime(out / "shop_grpo_lr0.01_s7" / "summary.json") == stamp


def test_stage_two_tunes_the_teacher_weight_at_the_chosen_rate_reusing_the_authors_point(
        tmp_path, monkeypatch):
    """FACTOR: the lr grid, then factor.kl_coef in {1, 0.1, 0} at the best rate; the
    authors' 1 is the stage-1 point itself (not trained twice); the choice is among the
    stage-2 points. Training replaced by a score per overrides."""
    c = apply_overrides(sweep.sweep_config(_config(tmp_path)),
                        {"sweep.methods": ("factor",), "sweep.lr_factors": (1.0, 2.0)})
    scores = {(0.01, None): 0.30, (0.02, None): 0.40, (0.02, 0.1): 0.45, (0.02, 0.0): 0.35}
    trained = []

    def point(config, experiment, env, method, over):
        key = (over["ppo.lr"], over.get("factor.kl_coef"))
        trained.append(key)
        name = sweep.tuning.point_name(env, method, over)
        return name, ([0, 4], [0.2, scores[key]]), scores[key]

    monkeypatch.setattr(sweep, "_point", point)
    r = sweep.sweep_method(c, "e", "shop", "factor")
    assert trained == [(0.01, None), (0.02, None), (0.02, 0.1), (0.02, 0.0)]
    assert r["chosen"] == {"ppo.lr": 0.02, "factor.kl_coef": 0.1}
    scores[(0.02, 0.1)] = 0.38            # now the authors' weight (the stage-1 point) wins
    r = sweep.sweep_method(c, "e", "shop", "factor")
    assert r["chosen"] == {"ppo.lr": 0.02, "factor.kl_coef": 1.0}
    assert r["points"][r["chosen_point"]]["score"] == 0.40


def test_a_best_rate_at_the_grids_edge_grows_the_grid_past_that_edge(tmp_path, monkeypatch):
    """The grid r, 2r, 4r: a best at the lower edge adds r/2 and, still best at the
    edge, r/4 (sweep.edge_extensions 2), then stops; an interior best adds nothing; the
    choice is made over every point trained."""
    c = apply_overrides(sweep.sweep_config(_config(tmp_path)),
                        {"sweep.lr_factors": (1.0, 2.0, 4.0), "sweep.edge_extensions": 2})
    lr = {k: float(f"{c.ppo.lr * k:.3g}") for k in (0.25, 0.5, 1, 2, 4)}
    scores = {lr[1]: 0.40, lr[2]: 0.35, lr[4]: 0.30, lr[0.5]: 0.45, lr[0.25]: 0.50}
    trained = []

    def point(config, experiment, env, method, over):
        trained.append(over["ppo.lr"])
        name = sweep.tuning.point_name(env, method, over)
        return name, ([0, 4], [0.2, scores[over["ppo.lr"]]]), scores[over["ppo.lr"]]

    monkeypatch.setattr(sweep, "_point", point)
    r = sweep.sweep_method(c, "e", "shop", "grpo")
    assert trained == [lr[1], lr[2], lr[4], lr[0.5], lr[0.25]]
    assert r["chosen"] == {"ppo.lr": lr[0.25]} and len(r["points"]) == 5
    trained.clear()
    scores[lr[0.5]] = 0.30                 # the edge's rate is interior after one: stops
    r = sweep.sweep_method(c, "e", "shop", "grpo")
    assert trained == [lr[1], lr[2], lr[4], lr[0.5]] and r["chosen"] == {"ppo.lr": lr[1]}
    trained.clear()
    scores[lr[2]] = 0.70                   # interior from the start: the grid only
    r = sweep.sweep_method(c, "e", "shop", "grpo")
    assert trained == [lr[1], lr[2], lr[4]] and r["chosen"] == {"ppo.lr": lr[2]}


def test_beyond_edge_steps_the_grids_ratio_past_either_edge():
    from experiments.harness import tuning
    assert tuning.beyond_edge([1e-4, 2e-4, 4e-4], 1e-4) == 5e-5
    assert tuning.beyond_edge([1e-4, 2e-4, 4e-4], 4e-4) == 8e-4
    assert tuning.beyond_edge([1e-4, 2e-4, 4e-4], 2e-4) is None
    assert tuning.beyond_edge([2.5e-5, 5e-5], 2.5e-5) == 1.25e-5


def test_replot_draws_an_archived_sweep_one_panel_per_method(tmp_path):
    for method, extra in (("grpo", {}), ("factor", {"factor.kl_coef": 0.1})):
        points = {}
        for lr in (1e-4, 2e-4):
            over = {"ppo.lr": lr}
            points[f"shop_{method}_lr{lr:g}"] = {"overrides": over, "score": lr,
                                                 "steps": [0, 5], "values": [0.4, 0.5]}
        if extra:
            points["shop_factor_lr0.0002_kl_coef0.1"] = {
                "overrides": {"ppo.lr": 2e-4, **extra}, "score": 0.0, "steps": [0, 5],
                "values": [0.4, 0.3]}
        (tmp_path / f"shop_{method}_tuning.json").write_text(json.dumps({
            "metric": "eval/env/success", "points": points,
            "chosen_point": f"shop_{method}_lr0.0002"}))
    path = sweep.replot(str(tmp_path), "shop", ("grpo", "factor"))
    assert path.endswith("shop_validation.png") and os.path.getsize(path) > 10_000
