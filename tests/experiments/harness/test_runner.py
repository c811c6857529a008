"""experiments/harness/runner.py: finished runs are reused only when their config matches."""
import json
import os

import numpy as np
import pytest

from experiments.configs import factor_table
from experiments.harness import registry
from experiments.harness.runner import apply_overrides, config_differences, run_grid


def config_to_dict(config):
    """What a run's config.json holds: the config with its ppo protocol resolved."""
    return json.loads(json.dumps(registry.check(config)[1].record))


def _finished_run(tmp_path, config, name, summary):
    run_dir = tmp_path / config.train.experiment / name
    os.makedirs(run_dir)
    (run_dir / "config.json").write_text(json.dumps(config_to_dict(config)))
    (run_dir / "summary.json").write_text(json.dumps(summary))


def _config(tmp_path, **overrides):
    c = factor_table.get_config("quick")
    c.train.results_dir = str(tmp_path)
    return apply_overrides(c, overrides)


def test_config_differences_names_fields_and_ignores_bookkeeping(tmp_path):
    c = _config(tmp_path)
    stored = config_to_dict(apply_overrides(c, {"train.steps": 7, "table.seeds": (1,),
                                                "train.progress": False}))
    assert config_differences(stored, c) == ["train.steps"]
    assert config_differences(config_to_dict(c), c) == []


def test_config_differences_sees_a_protocol_field_set_or_left_to_the_method(tmp_path):
    c = _config(tmp_path)                      # method factor: one update on the whole batch
    stored = config_to_dict(c)
    assert stored["ppo"]["epochs"] == 1 and stored["ppo"]["lr_scale"] == 0.5
    assert config_differences(stored, apply_overrides(c, {"ppo.epochs": 1})) == []
    assert config_differences(stored, apply_overrides(c, {"ppo.epochs": 2})) == ["ppo.epochs"]
    assert "ppo.kl_coef" in config_differences(stored, apply_overrides(c, {"method": "grpo"}))


def test_config_differences_drops_fields_retired_where_they_changed_nothing(tmp_path):
    """A run stored before issue 35 holds the earlier ASCT variant's fields: with
    asct.variant "paper" they changed nothing and are dropped; an earlier-variant run
    differs."""
    c = _config(tmp_path)
    stored = config_to_dict(c)
    stored["asct"].update(variant="paper", centring="policy_weighted", alpha=1.0,
                          search={"num_simulations": 16, "c": 1.0})
    assert config_differences(stored, c) == []
    stored["asct"]["variant"] = "earlier"
    assert "asct.variant" in config_differences(stored, c)
    assert "asct.search.c" in config_differences(stored, c)


def test_config_differences_drops_retired_factor_options_at_the_value_now_computed(tmp_path):
    c = _config(tmp_path)
    stored = config_to_dict(c)
    stored["factor"].update(alloc_tokens="all", normalise="none")
    assert config_differences(stored, c) == []
    stored["factor"].update(alloc_tokens="choice", normalise="batch_std")
    assert config_differences(stored, c) == ["factor.alloc_tokens", "factor.normalise"]


def test_run_grid_reuses_a_matching_run(tmp_path):
    c = _config(tmp_path)
    run = apply_overrides(c, {"method": "grpo", "seed": 5})
    run.train.run = "g_s5"
    _finished_run(tmp_path, run, "g_s5", {"final/env/success": 0.25})
    out = run_grid(c, [("g", {"method": "grpo"})], (5,), c.train.experiment)
    assert out == {"g": [{"final/env/success": 0.25}]}


def test_run_grid_refuses_a_run_of_another_scale(tmp_path):
    c = _config(tmp_path)
    run = apply_overrides(c, {"method": "grpo", "seed": 5, "train.steps": 60})
    run.train.run = "g_s5"
    _finished_run(tmp_path, run, "g_s5", {"final/env/success": 0.25})
    with pytest.raises(ValueError, match=r"another config \(fields train.steps\)"):
        run_grid(c, [("g", {"method": "grpo"})], (5,), c.train.experiment)


def test_liveness_table_takes_each_seeds_first_grad_norm_and_means_over_steps(tmp_path):
    from experiments.harness.runner import liveness_table
    rows = {42: [{"step": 0, "eval/x": 1.0},
                 {"step": 1, "train/grad_norm": 2.0, "k": 1.0, "train/updates": 2.0},
                 {"step": 2, "train/grad_norm": 10.0, "k": 3.0, "train/updates": 4.0}],
            43: [{"step": 1, "train/grad_norm": 4.0, "k": 5.0, "train/updates": 3.0}]}
    for seed, recs in rows.items():
        os.makedirs(tmp_path / f"m_s{seed}")
        (tmp_path / f"m_s{seed}" / "metrics.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in recs))
    text = liveness_table(str(tmp_path), ["m", "absent"], (42, 43), {"k": "K", "q": "Q"})
    lines = text.strip().splitlines()
    # then the policy-step columns (tests/experiments/harness/test_runner_liveness.py; "-" here: no config.json)
    head = "| method | grad norm @1 | updates / step | clip share | K | Q |"
    assert lines[0].startswith(head) and len(lines) == 3
    # (2 + 4) / 2; updates (2 + 4 + 3) / 3; (1 + 3 + 5) / 3
    assert lines[2].startswith("| m | 3.000 | 3.000 | - | 3.000 | - |")


def test_write_comparisons_pairs_the_table_seeds_and_names_the_papers_gap(tmp_path):
    from experiments.harness.runner import write_comparisons
    def runs(final, start=(0.4, 0.45, 0.5)):
        return [{"seed": s, "final/env/success": f, "initial/env/success": i}
                for s, f, i in zip((42, 43, 1337), final, start)]
    results = {"factor": runs((0.50, 0.56, 0.61)), "grpo": runs((0.40, 0.45, 0.50)),
               "serl": runs((0.40, 0.44, 0.52))}
    stem = str(tmp_path / "shop_comparisons")
    table = write_comparisons(results, factor_table.COMPARISONS, "final/env/success",
                              {"factor": 0.824, "grpo": 0.643}, stem)
    with open(stem + ".json") as f:
        rows = {r["comparison"]: r for r in json.load(f)["rows"]}
    # pairs whose methods did not run (grpo_extended, the ablations) are left out
    assert set(rows) == {"factor - serl", "serl - grpo", "factor - grpo"}
    # d = (0.10, 0.11, 0.11): 0.1067 +- t_{0.975, 2} 0.00577 / sqrt(3) = +- 0.0143
    assert rows["factor - grpo"]["95 % t interval"] == "[+0.0923, +0.1210]"
    assert rows["factor - grpo"]["verdict"] == "shown"
    assert rows["factor - grpo"]["paper gap"] == "+0.1810"
    assert rows["factor - serl"]["paper gap"] == "-"          # no SERL number given
    assert "factor - serl" in table and open(stem + ".md").read() == table + "\n"
    assert table.startswith("Paired over seeds 42, 43, 1337.")
    with open(stem + ".json") as f:
        moved = {r["comparison"]: r for r in json.load(f)["moved"]}
    # each method against its own start: grpo did not move (a difference of exactly 0)
    assert moved["grpo - grpo (start)"]["mean difference"] == "+0.0000"
    assert moved["grpo - grpo (start)"]["verdict"] == "inconclusive"
    assert moved["factor - factor (start)"]["verdict"] == "shown"
    tuned = {m: [dict(r, seed=s) for r, s in zip(v, (7, 8, 9))] for m, v in results.items()}
    assert "seed 7 is the tuning seed" in write_comparisons(
        tuned, factor_table.COMPARISONS, "final/env/success", {}, stem)
    # a method with more seeds (a headline one) pairs over the seeds both ran
    results["factor"] = results["factor"] + [{"seed": 1, "final/env/success": 0.9}]
    table = write_comparisons(results, factor_table.COMPARISONS, "final/env/success", {},
                              stem)
    assert "factor: 42, 43, 1337, 1" in table
    with open(stem + ".json") as f:
        assert {r["n"] for r in json.load(f)["rows"]} == {3}


def test_write_comparisons_on_log_costs_gives_the_ratio_and_the_papers_log_gap(tmp_path):
    from experiments.harness.runner import write_comparisons
    # VinePPO spends 2x, 2.2x, 1.8x AgentUCT's tokens on seeds 42, 43, 1337
    results = {m: [{"seed": s, "total/aux_tokens": t} for s, t in zip((42, 43, 1337), ts)]
               for m, ts in {"vineppo": (200.0, 220.0, 180.0),
                             "asct_agentuct": (100.0, 100.0, 100.0)}.items()}
    stem = str(tmp_path / "cost")
    table = write_comparisons(results, [("vineppo", "asct_agentuct")], "total/aux_tokens",
                              {"asct_agentuct": 1.0, "vineppo": 2.01}, stem, log=True)
    assert table.startswith("log(total/aux_tokens)")
    with open(stem + ".json") as f:
        (row,) = json.load(f)["rows"]
    mean = np.mean(np.log([2.0, 2.2, 1.8]))
    assert row["mean difference"] == f"{mean:+.4f}" and row["verdict"] == "shown"
    assert row["paper gap"] == f"{np.log(2.01):+.4f}"
    # a method that spends nothing (PPO) is not in the cost comparison: left out, no error
    results["ppo_return"] = [{"seed": s, "total/aux_tokens": 0.0} for s in (42, 43, 1337)]
    write_comparisons(results, [("vineppo", "asct_agentuct")], "total/aux_tokens",
                      {"asct_agentuct": 1.0, "vineppo": 2.01}, stem, log=True)


@pytest.mark.slow
def test_restore_run_state_reads_a_runs_checkpoint_with_the_learners_frozen_params(tmp_path):
    """A 2-step tiny run checkpointed at steps 1 and 2: restoring the last gives the state
    the run ended with (method state included), an earlier step its own step, and the
    frozen parameters (LoRA's base weights, not checkpointed) are the learner's."""
    import jax

    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    from experiments.configs import base
    from experiments.harness.runner import restore_run_state, train_run

    c = base.use_test_model(factor_table.get_config("smoke"))
    c.train.results_dir = str(tmp_path)
    c.train.steps = c.train.eval_every = 2
    c.train.checkpoint_every, c.train.keep = 1, 3
    c.train.eval_episodes, c.train.progress = 8, False
    c.rollout.num_groups, c.rollout.group_size = 2, 4
    c.train.experiment, c.train.run = "t", "r"
    c.model.lora_rank = 2
    _, final = train_run(c, return_state=True)
    learner = build_learner(c, registry.get(c.method), JaxEnvSource(c))
    ckdir = str(tmp_path / "t" / "r" / "checkpoints")
    state, step = restore_run_state(learner, ckdir)
    assert step == 2
    for name in ("params", "method_state", "opt_state"):
        for x, y in zip(jax.tree.leaves(getattr(final, name)),
                        jax.tree.leaves(getattr(state, name))):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    frozen = jax.tree.leaves(learner.init_state.frozen)
    assert frozen and all(x is y for x, y in zip(frozen, jax.tree.leaves(state.frozen)))
    _, first = restore_run_state(learner, ckdir, step=1)
    assert first == 1


def test_the_searched_generate_table_reuses_the_generate_tables_grpo_and_factor_runs():
    """factor_generate.py:asct_<scale> differs from <scale> only in bookkeeping for the
    methods both tables run (so a finished GRPO / FACTOR run is reused), and compares only
    methods it runs."""
    from experiments.configs import factor_generate
    for scale in ("smoke_warm", "quick_warm"):
        plain = factor_generate.get_config(scale)
        searched = factor_generate.get_config("asct_" + scale)
        assert searched.train.experiment != plain.train.experiment
        for m in ("grpo", "factor"):
            run = {"method": m, "env.name": "shop"}
            stored = config_to_dict(apply_overrides(plain, run))
            assert config_differences(stored, apply_overrides(searched, run)) == []
        assert {m for c in searched.table.comparisons for m in c[:2]} <= \
            set(searched.table.methods)
