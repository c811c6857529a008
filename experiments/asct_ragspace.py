"""The ASCT table on the RAGSpace analogue (the ASCT paper's Tables 2-6; config:
experiments/configs/asct_ragspace.py).

For every method and seed: train on the train split, then evaluate the final actor
greedily on the test split (utility = F1 - 0.1 * words / 4096, F1, execution words), on
the transfer sets (config.table.transfer: the 2Wiki- and MuSiQue-like question mixes,
no retraining) and on the description probe (config.table.probe: a new retriever A under
four descriptions; its selection rate). Beside them: T_aux = T_env + T_actor spent in
training, J_search (Eq. 5), J_deploy(N) = U_test - beta T_aux / N (Eq. 6, beta = 1e-4),
and the Base row (the default workflow, no training). Writes
results/<experiment>/{table,transfer,probe,base}.{md,json} and utility_vs_aux.png.
"""
from __future__ import annotations

import copy
import os

import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.infra import config_cli
from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text
from asct_jax.infra.tables import scatter_with_errorbars
from experiments.runner import from_warm_start, run_grid, write_table

BETA = 1e-4
DEPLOY_USES = (100_000, 500_000, 1_000_000)
PROBE_DESCRIPTIONS = ("relation", "type", "name", "opposite")
MAIN_METRICS = {
    "final/env/utility": "utility",
    "final/env/f1": "answer F1",
    "final/env/exec_words": "execution words",
    "total/t_env": "T_env (train)",
    "total/t_actor": "T_actor (train)",
    "total/aux_tokens": "T_aux (train)",
    "mean/j_search": "J_search",
    "j_deploy/500000": "J_deploy(5e5)",
    "total/env_calls": "env calls",
    "wall_clock_s": "wall clock (s)",
}


def held_out_eval(config, params, **options):
    """Greedy held-out metrics of `params` on ragspace with env.options updated."""
    from asct_jax.rl.trainer import JaxEnvSource, build_learner
    from experiments import registry

    import ml_collections

    c = copy.deepcopy(config)
    c.env.options = ml_collections.ConfigDict(dict(c.env.options.to_dict(), **options))
    source = JaxEnvSource(c)
    evaluate = source.make_eval(build_learner(c, registry.get(c.method), source))
    return evaluate(params)


def after_run(config, summary, params):
    """J_deploy(N), the transfer sets and the description probe of one trained actor."""
    out = {f"j_deploy/{n}": summary["final/env/utility"] - BETA * summary["total/aux_tokens"] / n
           for n in DEPLOY_USES}
    for ds in config.table.transfer:
        m = held_out_eval(config, params, dataset=ds)
        out.update({k.replace("eval/", f"transfer/{ds}/", 1): v for k, v in m.items()})
    if config.table.probe:
        for d in PROBE_DESCRIPTIONS:
            m = held_out_eval(config, params, probe=True, probe_description=d)
            out[f"probe/{d}/selection"] = m["eval/env/probe_chosen"]
            out[f"probe/{d}/utility"] = m["eval/env/utility"]
    return out


def base_rows(config):
    """The untrained workflows on the test split (every question once): the default
    workflow (the paper's Base), the scripted adaptive rule, and the best fixed workflow
    is in experiments.ragspace_landscape."""
    from asct_jax.envs import make, module_of

    rows = {}
    mod = module_of("ragspace")
    for ds in ("hotpot",) + tuple(config.table.transfer):
        opts = dict(config.env.options, dataset=ds, split="test")
        env, params = make("ragspace", size=config.env.size, **opts)
        lo, hi = params.split_range()
        qids = jnp.arange(lo, hi, dtype=jnp.int32)
        for name, pol in (("base", mod.base_policy), ("scripted", mod.expert_policy)):
            info = jax.jit(jax.vmap(lambda q: mod.run_policy(env, params, q, pol)))(qids)
            rows[f"{ds}/{name}"] = {k: float(np.mean(v)) for k, v in info.items()
                                    if k in ("utility", "f1", "exec_words")}
    return rows


LIVENESS = {   # per-step metrics, mean over the steps and seeds (first step: "grad norm @1")
    "credit/coef_abs_mean_raw": "mean |A| (raw)",
    "credit/coef_abs_mean": "mean |A| (trained)",
    "train/grad_norm": "grad norm",
    "credit/asct/fallback_frac": "fallback turns",
    "credit/asct/legal_root_actions": "legal root actions",
    "credit/asct/root_visit_max_frac": "max root visit share",
    "credit/asct/trial_utility": "trial utility",
}


def liveness(out_dir, methods, seeds):
    """Markdown: that each comparison is live (advantage scale, the policy-gradient norm at
    the first batch, search coverage), from each run's metrics.jsonl."""
    from asct_jax.infra.run_logger import read_jsonl

    head = ["method", "grad norm @1"] + list(LIVENESS.values())
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        runs = [[r for r in read_jsonl(os.path.join(out_dir, f"{m}_s{s}", "metrics.jsonl"))
                 if "train/grad_norm" in r] for s in seeds]
        runs = [r for r in runs if r]
        recs = [r for run in runs for r in run]
        if not recs:
            continue
        first = [run[0]["train/grad_norm"] for run in runs]      # each seed's first batch
        cells = [m, f"{np.mean(first):.3f}" if first else "-"]
        for k in LIVENESS:
            v = [r[k] for r in recs if k in r]
            cells.append(f"{np.mean(v):.3f}" if v else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(config):
    out_dir = os.path.join(config.train.results_dir, config.train.experiment)
    os.makedirs(out_dir, exist_ok=True)
    base = base_rows(config)
    atomic_write_json(os.path.join(out_dir, "base.json"), base)
    seeds = tuple(config.table.seeds)
    variants = [(m, from_warm_start(config, {"method": m})) for m in config.table.methods]
    results = run_grid(config, variants, seeds, config.train.experiment, after_run=after_run)
    print(write_table(results, MAIN_METRICS, os.path.join(out_dir, "table")))
    scatter_with_errorbars(
        os.path.join(out_dir, "utility_vs_aux.png"),
        {m: {"T_aux": [r["total/aux_tokens"] for r in runs],
             "utility": [r["final/env/utility"] for r in runs]} for m, runs in results.items()},
        "T_aux", "utility", title="ragspace analogue: held-out utility vs auxiliary tokens")
    if config.table.transfer:
        tm = {}
        for ds in config.table.transfer:
            tm.update({f"transfer/{ds}/env/utility": f"{ds} utility",
                       f"transfer/{ds}/env/f1": f"{ds} F1",
                       f"transfer/{ds}/env/exec_words": f"{ds} words"})
        print(write_table(results, tm, os.path.join(out_dir, "transfer")))
    if config.table.probe:
        pm = {f"probe/{d}/selection": f"A selected ({d})" for d in PROBE_DESCRIPTIONS}
        print(write_table(results, pm, os.path.join(out_dir, "probe")))
    live = liveness(out_dir, config.table.methods, seeds)
    atomic_write_text(os.path.join(out_dir, "liveness.md"), live)
    print(live)
    print("untrained (test split):", base)


if __name__ == "__main__":
    config_cli.run_main(main)
