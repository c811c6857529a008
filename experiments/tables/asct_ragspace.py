"""The ASCT table on the RAGSpace analogue (the ASCT paper's Tables 2-6; config:
experiments/configs/asct_ragspace.py).

For every method and seed: train on the train split, then evaluate the final actor
greedily on the test split (utility = F1 - 0.1 * words / 4096, F1, execution words), on
the transfer sets (config.table.transfer: the 2Wiki- and MuSiQue-like question mixes,
no retraining) and on the description probe (config.table.probe: a new retriever A under
four descriptions; its selection rate). Beside them: T_aux = T_env + T_actor spent in
training (its actor scoring in asct.actor_token_unit, and T_aux both ways: word tokens and
the chat prompt's tokens), J_search (Eq. 5), J_deploy(N) = U_test - beta T_aux / N (Eq. 6,
beta = 1e-4), and the Base row (the default workflow, no training); the test-split utility
per question difficulty (easy / medium / hard: the same greedy episodes as the utility
column, grouped by the hidden question's difficulty); the paper's Table 3 ledger
(`ledger_table`: T_env by category, the actor's scoring of continuations, of the main
trajectory and the optimizer's forwards, tokens per actor state; asct_jax.search.ledger).
Writes results/<experiment>/{table,ledger,difficulty,transfer,probe,base}.{md,json} and
utility_vs_aux.png.
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
from experiments.configs.asct_ragspace import GROUPED
from experiments.harness.runner import (from_warm_start, liveness_table, method_seeds,
                                        run_grid, write_comparisons, write_table)
from experiments.harness.tuning import tuned_overrides

BETA = 1e-4
DEPLOY_USES = (100_000, 500_000, 1_000_000)
PROBE_DESCRIPTIONS = ("relation", "type", "name", "opposite")
DIFFICULTY = ("easy", "medium", "hard")     # ragspace's info["difficulty"] 0 / 1 / 2
# The paper's Table 2 (HotpotQA test utility, mean of 3 seeds): its gaps beside ours.
PAPER_UTILITY = {"ppo_return": 0.5651, "vineppo": 0.5939, "asct_uniform": 0.6146,
                 "asct_uct": 0.6075, "asct_agentuct": 0.6187, "asct_actor_rollout": 0.5975}
# The paper's T_aux relative to AgentUCT's (its Table 3: VinePPO 2.01x AgentUCT's, i.e.
# AgentUCT / VinePPO 0.50): the cost comparison's gap is log 2.01.
PAPER_T_AUX = {"asct_agentuct": 1.0, "vineppo": 2.01}
MAIN_METRICS = {
    "final/env/utility": "utility",
    "final/env/f1": "answer F1",
    "final/env/exec_words": "execution words",
    "total/t_env": "T_env (train)",
    "total/t_actor": "T_actor (train)",
    "total/aux_tokens": "T_aux (train)",
    "ledger/t_aux/words": "T_aux (words)",
    "ledger/t_aux/chat": "T_aux (chat)",
    "mean/j_search": "J_search",
    "j_deploy/500000": "J_deploy(5e5)",
    "total/env_calls": "env calls",
    "wall_clock_s": "wall clock (s)",
}


def held_out_eval(config, params, **options):
    """Greedy held-out metrics of `params` on ragspace with env.options updated."""
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    from experiments.harness import registry

    import ml_collections

    c = copy.deepcopy(config)
    c.env.options = ml_collections.ConfigDict(dict(c.env.options.to_dict(), **options))
    source = JaxEnvSource(c)
    evaluate = source.make_eval(build_learner(c, registry.get(c.method), source))
    return evaluate(params)


def by_difficulty(info) -> dict:
    """{"difficulty/<d>/utility": mean, "difficulty/<d>/count": episodes} of final infos
    (host arrays with "utility" and "difficulty"), for the difficulties present."""
    diff = np.asarray(info["difficulty"]).astype(int)
    util = np.asarray(info["utility"], np.float64)
    out = {}
    for k, d in enumerate(DIFFICULTY):
        if np.any(diff == k):
            out[f"difficulty/{d}/utility"] = float(np.mean(util[diff == k]))
            out[f"difficulty/{d}/count"] = int(np.sum(diff == k))
    return out


def difficulty_eval(config, params) -> dict:
    """Held-out utility of `params` per question difficulty: the greedy evaluation's own
    episodes (its environment and key, train.held_out_seed: the first eval_episodes
    questions of its held-out split once each, group size 1, so the count-weighted mean
    is final/env/utility), grouped by info["difficulty"]."""
    from asct_jax.envs.questions import evaluation_question_ids
    from asct_jax.rl.rollout import rollout
    from asct_jax.rl.build import build_policy
    from asct_jax.rl.run_config import run_config
    from asct_jax.rl.sources import JaxEnvSource, held_out_env

    tc = config.train
    source = JaxEnvSource(config)
    env, env_params = held_out_env(config, source)
    policy, _ = build_policy(config, source.vocab_size, source.shape, source.prompt)
    qids = evaluation_question_ids(env, env_params, tc.eval_episodes)   # as make_eval
    info = jax.jit(lambda p, k: rollout(policy, p, env, env_params, k, int(qids.shape[0]), 1,
                                        greedy=tc.eval_greedy, question_ids=qids).final_info)(
        params, jax.random.key(run_config(config).train.held_out_seed))
    return by_difficulty(jax.device_get(info))


UNITS = ("words", "chat", "chat_per_label")   # asct_jax.search.scoring.ACTOR_UNITS
ENV_PARTS = ("generator_input", "generator_output", "query_embedding", "reranker_input")


def ledger_summary(summary) -> dict:
    """The Table 3 ledger of one run's summary (total/ledger/..., asct_jax.search.ledger):
    T_aux in each unit (T_env + the continuations' scoring), the actor-scoring subtotal
    (continuations + main trajectory + optimizer forwards) and the tokens per actor state
    (one forward over a decision: optimizer_pass / decisions). {} for a run without it."""
    g = lambda k: summary.get(f"total/ledger/{k}")  # noqa: E731
    if g("decisions") is None:
        return {}
    out = {}
    for u in UNITS:
        if g(f"continuations/{u}") is None:
            continue
        cont, main, fwd = g(f"continuations/{u}"), g(f"main_trajectory/{u}"), \
            g(f"optimizer_forwards/{u}")
        out[f"ledger/t_aux/{u}"] = summary["total/t_env"] + cont
        out[f"ledger/actor_subtotal/{u}"] = cont + main + fwd
        out[f"ledger/per_state/{u}"] = g(f"optimizer_pass/{u}") / max(g("decisions"), 1.0)
    return out


def after_run(config, summary, params):
    """J_deploy(N), the Table 3 ledger, the utility per difficulty, the transfer sets and
    the description probe of one trained actor."""
    out = {f"j_deploy/{n}": summary["final/env/utility"] - BETA * summary["total/aux_tokens"] / n
           for n in DEPLOY_USES}
    out.update(ledger_summary(summary))
    out.update(difficulty_eval(config, params))
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
    is in experiments.studies.ragspace_landscape."""
    from asct_jax.envs import make, module_of

    rows = {}
    mod = module_of("ragspace")
    for ds in ("hotpot",) + tuple(config.table.transfer):
        opts = dict(config.env.options, dataset=ds, split="test")
        env, params = make("ragspace", size=config.env.size, **opts)
        lo, hi = params.split_range()
        qids = jnp.arange(lo, hi, dtype=jnp.int32)
        for name, pol in (("base", mod.base_policy), ("scripted", mod.expert_policy)):
            info = jax.device_get(
                jax.jit(jax.vmap(lambda q: mod.run_policy(env, params, q, pol)))(qids))
            rows[f"{ds}/{name}"] = dict(
                {k: float(np.mean(v)) for k, v in info.items()
                 if k in ("utility", "f1", "exec_words")}, **by_difficulty(info))
    return rows


def difficulty_table(results, base, out_dir) -> str:
    """difficulty.{md,json}: test-split utility per difficulty (mean ± std over seeds), the
    episodes of each, and the untrained workflows' per-difficulty utility beside it."""
    cols = {f"difficulty/{d}/utility": d for d in DIFFICULTY}
    stem = os.path.join(out_dir, "difficulty")
    table = write_table(results, cols, stem)
    counts = next((r for runs in results.values() for r in runs
                   if "difficulty/easy/count" in r), {})
    notes = ["", "Greedy episodes on the test split (the utility column's), per difficulty: "
             + " / ".join(f"{d} {counts.get(f'difficulty/{d}/count', '-')}"
                          for d in DIFFICULTY) + " (the same episodes for every run)."]
    for name in ("base", "scripted"):
        row = base.get(f"hotpot/{name}", {})
        if any(f"difficulty/{d}/utility" in row for d in DIFFICULTY):
            notes.append(f"Untrained {name} (every test question once): " + " / ".join(
                f"{d} {row[f'difficulty/{d}/utility']:.3f}" for d in DIFFICULTY
                if f"difficulty/{d}/utility" in row) + ".")
    text = table + "\n" + "\n".join(notes) + "\n"
    atomic_write_text(stem + ".md", text)
    return text


def ledger_table(results, out_dir) -> str:
    """ledger.{md,json}: the paper's Table 3 for each method (mean ± std over seeds):
    T_aux, T_env by category, the actor's scoring (auxiliary continuations, main-trajectory
    collection, optimizer forwards) in word and chat tokens, and the tokens per actor
    state (the paper's Table 3 implies about 482 for its Qwen3-4B prompt)."""
    cols = {"ledger/t_aux/words": "T_aux (words)", "ledger/t_aux/chat": "T_aux (chat)",
            "total/t_env": "T_env",
            **{f"total/ledger/env/{p}": p.replace("_", " ") for p in ENV_PARTS}}
    for u in ("words", "chat"):
        cols.update({f"ledger/actor_subtotal/{u}": f"actor subtotal ({u})",
                     f"total/ledger/continuations/{u}": f"continuations ({u})",
                     f"total/ledger/main_trajectory/{u}": f"main trajectory ({u})",
                     f"total/ledger/optimizer_forwards/{u}": f"optimizer forwards ({u})",
                     f"ledger/per_state/{u}": f"tokens / actor state ({u})"})
    cols["ledger/per_state/chat_per_label"] = "tokens / actor state (chat, per label)"
    cols["total/ledger/decisions"] = "actor states"
    cols["mean/j_search"] = "J_search"
    with_ledger = {m: runs for m, runs in results.items()
                   if any("ledger/t_aux/words" in r for r in runs)}
    fmt = {title: "{:.3f}" if key == "mean/j_search" else "{:.1f}" for key, title in cols.items()}
    return write_table(with_ledger, cols, os.path.join(out_dir, "ledger"), fmt=fmt)


LIVENESS = {   # per-step metrics, mean over the steps and seeds (first step: "grad norm @1")
    "credit/coef_abs_mean_raw": "mean |A| (raw)",
    "credit/coef_abs_mean": "mean |A| (trained)",
    "train/grad_norm": "grad norm",
    "credit/asct/fallback_frac": "fallback turns",
    "credit/asct/legal_root_actions": "legal root actions",
    "credit/asct/root_visit_max_frac": "max root visit share",
    "credit/asct/trial_utility": "trial utility",
    "credit/j_search": "J_search",
    "credit/ledger/continuation_decisions": "scored continuation states / step",
    "credit/ledger/decisions": "actor states / step",
}


def liveness(out_dir, methods, seeds):
    """Markdown: that each comparison is live (advantage scale, the policy-gradient norm at
    the first batch, search coverage), from each run's metrics.jsonl."""
    return liveness_table(out_dir, methods, seeds, LIVENESS)


def method_overrides(config, method: str) -> dict:
    """The variant of `method`: a grouped method (configs GROUPED, GiGPO) plays the
    iteration's episodes as num_groups / G questions x G."""
    g = GROUPED.get(method, 1)
    if g == 1:
        return {"method": method}
    n = config.rollout.num_groups * config.rollout.group_size
    return {"method": method, "rollout.num_groups": max(n // g, 1), "rollout.group_size": g}


def main(config):
    out_dir = os.path.join(config.train.results_dir, config.train.experiment)
    os.makedirs(out_dir, exist_ok=True)
    base = base_rows(config)
    atomic_write_json(os.path.join(out_dir, "base.json"), base)
    results = {}
    for m in config.table.methods:   # the headline methods on more seeds (method_seeds)
        variant = (m, from_warm_start(config, {**method_overrides(config, m),
                                               **tuned_overrides(config.table, "ragspace", m)}))
        results.update(run_grid(config, [variant], method_seeds(config.table, m),
                                config.train.experiment, after_run=after_run))
    seeds = max((method_seeds(config.table, m) for m in results), key=len)
    print(write_comparisons(results, config.table.comparisons, "final/env/utility",
                            PAPER_UTILITY, os.path.join(out_dir, "comparisons")))
    print(write_comparisons(results, config.table.cost_comparisons, "total/aux_tokens",
                            PAPER_T_AUX, os.path.join(out_dir, "cost_comparisons"), log=True))
    print(write_table(results, MAIN_METRICS, os.path.join(out_dir, "table")))
    print(ledger_table(results, out_dir))
    print(difficulty_table(results, base, out_dir))
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
