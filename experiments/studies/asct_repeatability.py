"""Repeatability of the searched action values (the ASCT paper's Table 15 / Figure 6
diagnostic) on the RAGSpace analogue.

    python -m experiments.studies.asct_repeatability [--config.questions=16] \
        [--config.repeats=4] ["--config.budgets=(12, 48)"]

Fixed five-action states: the retriever decision of `questions` training questions,
reached by the default first choice (original question). Each evaluator searches every
state `repeats` times independently (fresh keys and a fresh execution cache each time)
at each budget B. Per evaluator and B:
  Q SD        the sample std of Q_hat(s, a) over the repeats, mean over states and actions;
  agreement   the fraction of actions whose centred credit Q_hat(s, a) - mean_b Q_hat(s, b)
              has the same sign in two repeats, mean over repeat pairs and states (the
              prior is uniform here: no actor is loaded, so the centring is uniform);
  tokens      T_env of one evaluation (after reuse), mean over states;
  utility     mean utility of the B trials; J_search = utility - 1e-4 tokens / B (Eq. 5);
  visits      the root visit counts, sorted per state, averaged (how each rule allocates).
Evaluators: root_mc (balanced root actions, uniform suffixes: the paper's root-stratified
MC), uniform, uct, agentuct (the paper's search, asct_jax.search.methods.paper_rules). Writes
results/asct_repeatability.{json,md} atomically. Runs on CPU in about a minute.
"""
from __future__ import annotations

import itertools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs import make
from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text
from asct_jax.search import SearchConfig, init_cache, search
from asct_jax.search.methods import paper_rules

CONFIG = "experiments/configs/studies/asct_repeatability.py"
EVALUATORS = ("root_mc", "uniform", "uct", "agentuct")
BETA = 1e-4


def evaluator(name: str, budget: int):
    """(SearchRules, SearchConfig) of an evaluator at budget B."""
    if name == "root_mc":
        return paper_rules("uniform"), SearchConfig(num_simulations=budget, max_depth=1)
    return paper_rules(name), SearchConfig(num_simulations=budget)


def fixed_states(env, params, num_questions: int):
    """The retriever-stage states of the first `num_questions` training questions."""
    qids = jnp.arange(num_questions, dtype=jnp.int32)
    s0 = jax.vmap(lambda q: env.reset_question(jax.random.PRNGKey(0), q, params))(qids)
    cands, _ = jax.vmap(env.legal_actions, in_axes=(0, None))(s0, params)
    s1, _ = jax.vmap(env.step, in_axes=(0, 0, None))(s0, cands[:, 0], params)   # original
    return s1


def run(num_questions=16, repeats=4, budgets=(12, 48), seed=0):
    env, params = make("ragspace", split="train")
    states = fixed_states(env, params, num_questions)
    k = env.num_actions
    uniform_prior = lambda s: (jnp.zeros((k,), jnp.float32), jnp.float32(0.0))  # noqa: E731
    out = {}
    for name, b in itertools.product(EVALUATORS, budgets):
        rules, cfg = evaluator(name, b)
        fn = jax.jit(lambda st, key, cache: search(env, params, st, uniform_prior, key, rules,
                                                   cfg, cache=cache))
        t0 = time.time()
        qs, masks, toks, utils, visits = [], [], [], [], []
        for r in range(repeats):
            o = fn(states, jax.random.PRNGKey(1000 * seed + r), init_cache(env, params))
            qs.append(np.asarray(o.q))
            masks.append(np.asarray(o.legal))
            toks.append(np.asarray(o.env_tokens))
            utils.append(np.asarray(o.search_value))
            visits.append(-np.sort(-np.asarray(o.visits), axis=-1))   # descending per state
        q = np.stack(qs)                                      # [R, S, K]
        legal = masks[0]
        sd = q.std(axis=0, ddof=1)[legal].mean()
        centred = q - np.where(legal, q, 0).sum(-1, keepdims=True) / legal.sum(-1, keepdims=True)
        agree = [np.mean((np.sign(centred[i]) == np.sign(centred[j]))[legal])
                 for i, j in itertools.combinations(range(repeats), 2)]
        tokens = float(np.mean(toks))
        utility = float(np.mean(utils))
        out[f"{name}@{b}"] = {"q_sd": float(sd), "agreement": float(np.mean(agree)),
                              "tokens": tokens, "utility": utility,
                              "j_search": utility - BETA * tokens / b,
                              # the root visit distribution: mean sorted visit counts
                              "root_visits_sorted": np.mean(visits, axis=(0, 1)).round(2).tolist(),
                              "seconds": time.time() - t0}
    return {"questions": num_questions, "repeats": repeats, "budgets": list(budgets),
            "note": "ragspace is an analogue of RAGSpace / HotpotQA; uniform prior",
            "results": out}


def to_markdown(res) -> str:
    lines = ["| evaluator | B | repeat Q SD | credit agreement | T_env / state | trial utility | J_search | root visits (sorted) |",
             "|---|---|---|---|---|---|---|---|"]
    for key, r in res["results"].items():
        name, b = key.split("@")
        lines.append(f"| {name} | {b} | {r['q_sd']:.4f} | {100 * r['agreement']:.1f} % | "
                     f"{r['tokens']:.0f} | {r['utility']:.4f} | {r['j_search']:.4f} | "
                     f"{' / '.join(f'{v:.1f}' for v in r['root_visits_sorted'])} |")
    return "\n".join(lines) + "\n"


def main(a):
    """Runs the study of `a` (experiments/configs/studies/asct_repeatability.py)."""
    if not a.budgets or min(a.budgets) < 1:
        raise ConfigError("budgets", f"{a.budgets!r}: every budget must be >= 1", "ints >= 1")
    res = run(a.questions, a.repeats, tuple(a.budgets))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    atomic_write_json(a.out + ".json", res)
    md = to_markdown(res)
    atomic_write_text(a.out + ".md", md)
    print(md)


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
