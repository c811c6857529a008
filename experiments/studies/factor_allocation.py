"""Where FACTOR's token weights put an action's credit: on the tokens where the actor had
a choice among the candidates, or on forced ones (docs/results/warm_tables.md).

    python -m experiments.studies.factor_allocation --config experiments/configs/factor_allocation.py

For each environment: one batch of the (warm-started, by default) actor, FACTOR's pieces
(factor_jax.methods.factor_pieces: continuations -> critic -> TAC -> HTA -> weights, at
the first step with HTA active) over every action token, and per credit sign the share
of the actions' credit that lands on choice tokens (fj.choice_tokens),

    share = mean over actions of (1/L_t) sum_j omega_{t,j} [j is a choice],

against the uniform weights' share, n_choice / L_t (also the share weights with mean 1
over the choice tokens would give: the retired factor.alloc_tokens = "choice", git tag
earlier-variants). Under constrained decoding a forced
token has log pi = 0 for all parameters, so credit on it moves nothing; the net credit on
choice tokens, sum over actions of A_t share_t, is what the update pushes with. Writes
results/<experiment>/allocation.{json,md}. A diagnostic on one batch, not a training run.
"""
from __future__ import annotations

import os

import jax
import numpy as np

from asct_jax.infra import config_cli
from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text
from asct_jax.infra.tables import markdown_table

COLUMNS = ["env", "start", "choice tokens", "delta on choice (mean, frac < 0)",
           "A>0 share: all / uniform", "A<0 share: all / uniform",
           "net credit on choice: all / choice (= uniform)"]


def allocation(config, env_name: str):
    """The numbers of one environment's row (a dict)."""
    import factor_jax as fj
    from asct_jax.rl.rollout import rollout
    from asct_jax.rl.train_step import policy_params
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    from experiments.harness import registry
    from factor_jax.methods import Schedule, factor_config, factor_pieces

    c = config.copy_and_resolve_references()
    c.env.name = env_name
    if c.table.warm_start:
        from experiments.harness.warm_start import shared
        c.train.init_from = shared(c)
    source = JaxEnvSource(c)
    learner = build_learner(c, registry.get("factor"), source)
    params = policy_params(learner.init_state)
    ctx = learner.ctx
    key_roll, key_credit = jax.random.split(jax.random.key(c.seed))
    batch = jax.jit(lambda p, k: rollout(learner.policy, p, source.env, source.env_params, k,
                                         c.rollout.num_groups, c.rollout.group_size))(
        params, key_roll)
    fc = factor_config(c)
    step = Schedule.of(fc).eta_start - 1      # the first step with HTA active
    p = jax.jit(lambda pr, b, k, ms: factor_pieces(fc, ctx, pr, b, k, step, ms))(
        params, batch, key_credit, learner.init_state.method_state)
    p = jax.tree.map(np.asarray, p.replace(critic=None, critic_metrics=None))
    tm = np.asarray(batch.token_mask)
    choice = np.asarray(fj.choice_tokens(batch.responses, batch.cand_tokens, batch.cand_mask,
                                         batch.token_mask))
    real = tm.any(-1)
    length = np.maximum(tm.sum(-1), 1)
    credit = p.credit   # TAC's; the token weights do not change it
    uniform = choice.sum(-1) / length   # the share of uniform (or "choice": mean-1) weights
    delta = (p.teacher - np.asarray(batch.logp_old))[choice]
    out = {"env": env_name, "seed": c.seed, "warm_start": bool(c.table.warm_start),
           "actions": int(real.sum()), "tokens": int(tm.sum()),
           "choice_tokens": int(choice.sum()),
           "delta_choice_mean": float(delta.mean()), "delta_choice_neg_frac": float((delta < 0).mean())}
    share_all = (p.weights * choice).sum(-1) / length
    for sign, sel in (("pos", (credit > 0) & real), ("neg", (credit < 0) & real)):
        out[f"{sign}_actions"] = int(sel.sum())
        out[f"{sign}_share_all"] = float(share_all[sel].mean())
        out[f"{sign}_share_uniform"] = float(uniform[sel].mean())
    out["net_all"] = float((credit * share_all)[real].sum())
    out["net_choice"] = float((credit * uniform)[real].sum())
    return out


def row(r):
    return [r["env"], "warm" if r["warm_start"] else "random",
            f"{r['choice_tokens']} of {r['tokens']} ({r['choice_tokens'] / r['tokens']:.2f})",
            f"{r['delta_choice_mean']:+.3f}, {r['delta_choice_neg_frac']:.2f}",
            f"{r['pos_share_all']:.3f} / {r['pos_share_uniform']:.3f}",
            f"{r['neg_share_all']:.3f} / {r['neg_share_uniform']:.3f}",
            f"{r['net_all']:+.2f} / {r['net_choice']:+.2f}"]


def main(config):
    out_dir = os.path.join(config.train.results_dir, config.train.experiment)
    results = []
    for env_name in config.table.envs:
        results.append(allocation(config, env_name))
        print(markdown_table([row(results[-1])], COLUMNS), flush=True)
    table = markdown_table([row(r) for r in results], COLUMNS)
    atomic_write_json(os.path.join(out_dir, "allocation.json"), results)
    atomic_write_text(os.path.join(out_dir, "allocation.md"), table + "\n")
    print(table)
    return results


if __name__ == "__main__":
    config_cli.run_main(main)
