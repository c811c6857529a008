"""The ASCT table (docs/methods.md, ASCT) on the rag_workflow analogue of HotpotQA agentic RAG.

For every method and seed: train, then evaluate the final actor on held-out episodes
(utility = answer F1 - lambda * execution tokens, F1, execution cost) and, if
config.table.transfer, on the changed component set. With table.warm_start every run
starts from the shared warm start of its environment config (experiments/warm_start.py;
the no-description study from one made without descriptions). Auxiliary tokens are the tokens the
credit method spent in training (search or VinePPO rollouts). Writes
results/asct_table/{table,transfer,descriptions,sweep}.{md,json} and utility_vs_aux.png.
"""
import os

from asct_jax.infra import config_cli
from asct_jax.infra.tables import scatter_with_errorbars
from experiments.runner import from_warm_start, run_grid, write_table

MAIN_METRICS = {
    "final/env/utility": "utility",
    "final/env/f1": "answer F1",
    "final/env/exec_cost": "exec cost (tokens)",
    "total/aux_tokens": "aux tokens (train)",
}
TRANSFER_METRICS = {"final/env/utility": "utility (default set)",
                    "transfer/env/utility": "utility (transfer set)",
                    "transfer/env/f1": "F1 (transfer set)"}


def transfer_eval(config, summary, params):
    """Held-out episodes of the trained actor on the changed component set."""
    import copy

    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    from experiments import registry

    c = copy.deepcopy(config)
    c.env.options.component_set = "transfer"
    source = JaxEnvSource(c)
    evaluate = source.make_eval(build_learner(c, registry.get(c.method), source))
    return {k.replace("eval/", "transfer/", 1): v for k, v in evaluate(params).items()}


def main(config):
    out_dir = os.path.join(config.train.results_dir, config.train.experiment)
    seeds = tuple(config.table.seeds)
    variants = [(m, from_warm_start(config, {"method": m}))
                for m in config.table.methods]
    results = run_grid(config, variants, seeds, config.train.experiment,
                       after_run=transfer_eval if config.table.transfer else None)
    print(write_table(results, MAIN_METRICS, os.path.join(out_dir, "table")))
    scatter_with_errorbars(
        os.path.join(out_dir, "utility_vs_aux.png"),
        {m: {"aux tokens": [r["total/aux_tokens"] for r in runs],
             "utility": [r["final/env/utility"] for r in runs]} for m, runs in results.items()},
        "aux tokens", "utility", title="rag_workflow: held-out utility vs auxiliary tokens")
    if config.table.transfer:
        print(write_table(results, TRANSFER_METRICS, os.path.join(out_dir, "transfer")))
    if config.table.descriptions:
        desc = [(f"{m}_nodesc", from_warm_start(
                    config, {"method": m, "env.options.describe_components": False}))
                for m in ("ppo_return", "asct_agentuct")]
        nodesc = run_grid(config, desc, seeds, config.train.experiment)
        both = {f"{m} (with descriptions)": results[m] for m in ("ppo_return", "asct_agentuct")
                if m in results}
        both.update({f"{m[:-7]} (no descriptions)": r for m, r in nodesc.items()})
        print(write_table(both, MAIN_METRICS, os.path.join(out_dir, "descriptions")))
    if config.table.sweep:
        sweep = [("agentuct_c0.5", {"method": "asct_agentuct", "asct.search.c": 0.5}),
                 ("agentuct_c2", {"method": "asct_agentuct", "asct.search.c": 2.0}),
                 ("agentuct_beta0", {"method": "asct_agentuct", "asct.search.beta": 0.0,
                                     "asct.beta_start": 0.0}),
                 ("agentuct_beta4", {"method": "asct_agentuct", "asct.search.beta": 4.0,
                                     "asct.beta_start": 4.0}),
                 ("agentuct_beta_sched", {"method": "asct_agentuct", "asct.beta_start": 0.0,
                                          "asct.search.beta": 4.0, "asct.beta_steps": 40}),
                 ("agentuct_logpi", {"method": "asct_agentuct", "asct.centring": "logpi"}),
                 ("agentuct_none", {"method": "asct_agentuct", "asct.centring": "none"}),
                 ("agentuct_sims32", {"method": "asct_agentuct",
                                      "asct.search.num_simulations": 32})]
        sweep = [(n, from_warm_start(config, o)) for n, o in sweep]
        res = run_grid(config, sweep, tuple(config.table.sweep_seeds), config.train.experiment)
        print(write_table(res, MAIN_METRICS, os.path.join(out_dir, "sweep")))


if __name__ == "__main__":
    config_cli.run_main(main)
