"""ASCT's actor regime on the RAGSpace analogue (issue 38): how uncertain the warm actor is
at the states it visits, and what that does to VinePPO's and ASCT's auxiliary work,
beside the figures the ASCT paper's ledger implies (arXiv 2609.35215, Tables 3, 11, 14).

    python -m experiments.studies.asct_regime --config.name=before
    python -m experiments.studies.asct_regime --config.name=after \
        --config.set=warm_start.label_smoothing=0.5
    python -m experiments.studies.asct_regime --config.name=end_agentuct_s42 \
        --config.set=method=asct_agentuct \
        --config.trained=results/asct_ragspace_quick_warm/asct_agentuct_s42   # after training

The options are the fields of experiments/configs/studies/asct_regime.py (several
overrides: "--config.set=('a=1', 'b=2')"). The warm start is the shared one of
asct_ragspace.py:quick_warm with the `set` overrides (made if absent:
experiments.harness.warm_start.shared; seed 7, the tuning seed). Its actor plays one
episode on each of the first `episodes` training questions, sampling (as an
iteration's collection does) and greedily. Measured:

  uncertainty   at the visited multi-action states (at least 2 legal labels; ">= 3": the
                paper's Table 14 multi-action states): the actor's entropy over the legal
                labels (nats) and its top label's probability, mean over states; 1 - top
                bounds the modal action's Eq. 4 credit: |Q(a*) - sum_a p_a Q(a)| <= (1 - p_a*)
                (max Q - min Q);
  VinePPO       at every visited state of the sampled episodes K = 12 continuations of the
                frozen actor (search.methods.vine_search: as in training, one iteration,
                an empty execution cache): T_env per state and the newly scored decisions
                per state;
  ASCT          AgentUCT and Uniform at the same states, B = 12 trials (the paper's search,
                an empty cache): T_env per state; the centring check of Table 14 (the
                share of >= 3-action decisions whose credit changes sign between the
                actor-weighted and the uniform baseline, both |A| > 1e-8);
  utility       held-out utility of the actor: the ASCT table's evaluation (greedy, the
                400 test questions), beside Base (the default workflow).

Newly scored decisions. A decision of VinePPO's continuations is a state at which the
frozen actor's label distribution is needed to draw the next action. It is newly scored
if no earlier request of this iteration scored the same state: the state (question,
workflow prefix) is neither one the main trajectory visited (the actor scored it when it
acted) nor one an earlier continuation of the same question decided at (the paper:
"scoring is charged once to the first requesting path"). Their number is that of the
distinct (question, prefix) pairs at which the continuations decide, less those the main
trajectory visited (`newly_scored`: the execution cache's "scored" table after the
search, search.cache), divided by the number of visited states.

The paper's implied figures (`paper_implied`, the arithmetic is in the JSON): actor
states per seed = ASCT-Uniform's T_env / its tokens per actor state = 197.077 M / 3,732.5
= 52,800 (Table 14 counts 52,801 decisions per seed); tokens per actor decision =
ASCT-Uniform's main-trajectory scoring / states = 25.442 M / 52,800 = 481.9 (every actor
state is scored once on the main trajectory; ASCT scores nothing else); VinePPO's newly
scored decisions = its auxiliary-continuation scoring / tokens per decision = 251.286 M /
481.9 = 521,500, i.e. 9.88 per state (assuming VinePPO visits as many states as
ASCT-Uniform: the same 6,000 episodes of a workflow of about 8.8 decisions); T_env per
state: VinePPO 137.088 M / 52,800 = 2,596, ASCT-Uniform 3,732.5, AgentUCT 3,664.5.
Writes results/asct_regime/<name>.{json,md}.
"""
from __future__ import annotations

import ast
import os
import time
from typing import Any, Dict

import chex
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text

CONFIG = "experiments/configs/studies/asct_regime.py"
# The ASCT paper's ledger (Table 3, Table 11; Table 14 for the counts; millions of tokens
# over 3 iterations, one seed's mean).
PAPER = {
    "uniform_t_env": 197.077e6, "uniform_tokens_per_state": 3732.5,
    "agentuct_tokens_per_state": 3664.5, "uniform_main_scoring": 25.442e6,
    "vine_continuation_scoring": 251.286e6, "vine_t_env": 137.088e6,
    "decisions_per_seed": (52828, 52833, 52741), "sign_changes": (3117, 36000),
}
EPS_CREDIT = 1e-8   # Table 14: both advantages must exceed it to count a sign change


def paper_implied() -> Dict[str, float]:
    """The per-state figures the paper's ledger implies (module docstring)."""
    p = PAPER
    states = p["uniform_t_env"] / p["uniform_tokens_per_state"]
    per_decision = p["uniform_main_scoring"] / states
    newly = p["vine_continuation_scoring"] / per_decision
    return {"states_per_seed": states,
            "states_per_seed_table14": float(np.mean(p["decisions_per_seed"])),
            "tokens_per_decision": per_decision,
            "vine_newly_scored": newly,
            "vine_newly_scored_per_state": newly / states,
            "vine_t_env_per_state": p["vine_t_env"] / states,
            "uniform_t_env_per_state": p["uniform_tokens_per_state"],
            "agentuct_t_env_per_state": p["agentuct_tokens_per_state"],
            "sign_change_rate": p["sign_changes"][0] / p["sign_changes"][1]}


def uncertainty(logp: chex.Array, legal: chex.Array, live: chex.Array,
                min_legal: int = 2) -> Dict[str, chex.Array]:
    """Mean entropy (nats) and top-label probability over the live states with at least
    `min_legal` legal labels. logp [N, K] (normalised over the legal labels), legal [N, K],
    live [N]. Returns {entropy, top, states} ([] each)."""
    chex.assert_equal_shape([logp, legal])
    p = jnp.where(legal, jnp.exp(logp), 0.0)
    ent = -jnp.sum(jnp.where(legal & (p > 0), p * logp, 0.0), -1)      # H = -sum p log p
    use = live & (jnp.sum(legal, -1) >= min_legal)
    n = jnp.maximum(jnp.sum(use), 1)
    return {"entropy": jnp.sum(jnp.where(use, ent, 0.0)) / n,
            "top": jnp.sum(jnp.where(use, jnp.max(p, -1), 0.0)) / n,
            "states": jnp.sum(use).astype(jnp.float32)}


def newly_scored(scored: chex.Array, qid: chex.Array, node: chex.Array,
                 live: chex.Array) -> chex.Array:
    """[] i32: the (question, prefix) pairs marked in `scored` [Q, P] (decided at by the
    continuations) that no live main-trajectory state (qid, node, live [N]) visited."""
    chex.assert_equal_shape([qid, node, live])
    row = jnp.where(live, qid, scored.shape[0])                          # dropped if not live
    main = jnp.zeros_like(scored).at[row, node].set(True, mode="drop")
    return jnp.sum(scored & ~main).astype(jnp.int32)


def sign_changes(q, q_mask, prior_logp, taken, live, min_legal: int = 3):
    """Table 14's centring check: (changes, decisions) over the live decisions with at
    least `min_legal` searched labels: the taken label's A = Q(a_t) - sum_a p_a Q(a)
    against Q(a_t) - mean_a Q(a), both |.| > 1e-8. q, q_mask, prior_logp [N, K]; taken,
    live [N]."""
    p = jnp.where(q_mask, jnp.exp(prior_logp), 0.0)
    p = p / jnp.maximum(jnp.sum(p, -1, keepdims=True), 1e-9)
    n = jnp.maximum(jnp.sum(q_mask, -1), 1)
    qa = jnp.take_along_axis(q, jnp.maximum(taken, 0)[:, None], -1)[:, 0]
    a_actor = qa - jnp.sum(p * jnp.where(q_mask, q, 0.0), -1)              # Eq. 4
    a_unif = qa - jnp.sum(jnp.where(q_mask, q, 0.0), -1) / n
    use = live & (jnp.sum(q_mask, -1) >= min_legal) & (taken >= 0)
    big = (jnp.abs(a_actor) > EPS_CREDIT) & (jnp.abs(a_unif) > EPS_CREDIT)
    return (jnp.sum(use & big & (jnp.sign(a_actor) != jnp.sign(a_unif))),
            jnp.sum(use))


def auxiliary_work(env, env_params, policy_fn, states, live, taken, key, k: int = 12,
                   trials: int = 12) -> Dict[str, chex.Array]:
    """VinePPO's and ASCT's work at the visited states (flattened [N, ...], live [N],
    taken [N] the main trajectory's labels) of one iteration, each from an empty cache:
    vine/{t_env, t_actor, newly_scored, scored}, <rule>/{t_env, sign_changes,
    decisions} for rule in agentuct, uniform; and the visited states. Jit it with env,
    policy_fn, k and trials static."""
    from asct_jax.search import init_cache, search
    from asct_jax.search.methods import ASCTConfig, paper_search, vine_search

    k_vine, k_asct = jax.random.split(key)
    cache = init_cache(env, env_params)
    qid = jax.vmap(lambda s: env.question_id(s, env_params))(states).astype(jnp.int32)
    node = jax.vmap(lambda s: env.workflow_node(s, env_params))(states).astype(jnp.int32)
    scfg, rules = vine_search(k, "words")   # no chat table here: word units
    vine = search(env, env_params, states, policy_fn, k_vine, rules, scfg, cache=cache)
    out = {"states": jnp.sum(live).astype(jnp.float32),
           "vine/t_env": jnp.sum(jnp.where(live, vine.env_tokens, 0.0)),
           "vine/t_actor": jnp.sum(jnp.where(live, vine.actor_tokens, 0.0)),
           "vine/scored": jnp.sum(vine.cache.scored).astype(jnp.float32),
           "vine/newly_scored": newly_scored(vine.cache.scored, qid, node, live)
           .astype(jnp.float32)}
    # actor scoring in word tokens, as vine_search's (the rule continuations score nothing)
    ac = ASCTConfig(trials=trials, states_per_episode=0, continuation="rule", cache=True,
                    c_exp=1.4, c_tok=1e-4, actor_token_unit="words")
    for rule in ("agentuct", "uniform"):
        scfg, rules = paper_search(ac, rule)
        o = search(env, env_params, states, policy_fn, k_asct, rules, scfg, cache=cache)
        changes, decisions = sign_changes(o.q, o.q_mask, o.prior_logp, taken, live)
        out.update({f"{rule}/t_env": jnp.sum(jnp.where(live, o.env_tokens, 0.0)),
                    f"{rule}/sign_changes": changes.astype(jnp.float32),
                    f"{rule}/decisions": decisions.astype(jnp.float32)})
    return out


def per_state(m: Dict[str, float]) -> Dict[str, float]:
    """The totals of auxiliary_work divided by the visited states."""
    n = max(m["states"], 1.0)
    out = {f"{k}_per_state": m[k] / n for k in ("vine/t_env", "vine/t_actor",
                                                "vine/newly_scored", "vine/scored",
                                                "agentuct/t_env", "uniform/t_env")}
    for rule in ("agentuct", "uniform"):
        out[f"{rule}/sign_change_rate"] = m[f"{rule}/sign_changes"] / max(
            m[f"{rule}/decisions"], 1.0)
    return out


def config_with(overrides: Dict[str, Any], scale: str = "quick_warm"):
    """asct_ragspace.py:<scale> at the tuning seed with the dotted overrides."""
    from experiments.configs import asct_ragspace
    from experiments.harness.dotted import apply_overrides
    return apply_overrides(asct_ragspace.get_config(scale),
                           dict({"seed": 7, "train.progress": False}, **overrides))


def run(overrides: Dict[str, Any], episodes: int = 160, key: int = 0,
        trained: str = "") -> Dict[str, Any]:
    """The measurements of the module docstring for the warm start of config_with(
    overrides), or, with `trained` (a finished run's folder, its method in overrides), for
    that run's actor at its last checkpoint; returns a JSON-able dict."""
    from asct_jax.envs.questions import evaluation_question_ids
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.credit import CreditContext, state_policy_fn
    from asct_jax.rl.rollout import rollout
    from asct_jax.rl.sources import JaxEnvSource
    from asct_jax.rl.train_step import policy_params
    from asct_jax.rl.types import merge_batch_turns
    from experiments.harness import registry
    from experiments.harness.runner import restore_run_state
    from experiments.harness.warm_start import key as warm_key, shared
    from experiments.tables.asct_ragspace import base_rows

    c = config_with(overrides)
    t0 = time.time()
    c.train.init_from = shared(c)
    source = JaxEnvSource(c)
    env, env_params = source.env, source.env_params
    learner = build_learner(c, registry.get(c.method), source)
    params = policy_params(learner.init_state)
    if trained:   # the actor at the end of training (the run's own last checkpoint)
        state, _ = restore_run_state(learner, os.path.join(trained, "checkpoints"))
        params = policy_params(state)
    held_out = source.make_eval(learner)(params)
    ctx = CreditContext(policy=learner.policy, env=env, env_params=env_params, group_size=1)
    pi = state_policy_fn(ctx, params)
    qids = evaluation_question_ids(env, env_params, episodes)
    k_sample, k_greedy, k_work = jax.random.split(jax.random.key(key), 3)

    def episodes_of(k, greedy):
        b = rollout(learner.policy, params, env, env_params, k, episodes, 1, greedy, qids)
        states = jax.tree.map(merge_batch_turns, b.states)
        return b, states, merge_batch_turns(b.turn_mask)

    def measure(k, greedy):
        b, states, live = episodes_of(k, greedy)
        logp, _ = jax.vmap(pi)(states)
        legal = merge_batch_turns(b.cand_mask)
        return dict({f"{n}/{m}": v for n, lo in (("multi", 2), ("multi3", 3))
                     for m, v in uncertainty(logp, legal, live, lo).items()},
                    utility=jnp.mean(b.final_info["utility"]),
                    decisions=jnp.sum(live) / episodes)

    stats = {"sampled": jax.jit(measure, static_argnums=1)(k_sample, False),
             "greedy": jax.jit(measure, static_argnums=1)(k_greedy, True)}

    @jax.jit
    def work(k):
        b, states, live = episodes_of(k_sample, False)
        return auxiliary_work(env, env_params, pi, states, live,
                              merge_batch_turns(b.action_index), k)

    totals = {k: float(v) for k, v in work(k_work).items()}
    base = base_rows(c)["hotpot/base"]
    res = {"name": warm_key(c), "warm_start": c.train.init_from, "trained": trained,
           "overrides": {k: v for k, v in overrides.items()},
           "label_smoothing": float(c.warm_start.label_smoothing),
           "episodes": episodes, "held_out_episodes": int(c.train.eval_episodes),
           **{f"{who}/{k}": float(v) for who, s in stats.items() for k, v in s.items()},
           **totals, **per_state(totals),
           "held_out/utility": float(held_out["eval/env/utility"]),
           "held_out/f1": float(held_out["eval/env/f1"]),
           "base/utility": float(base["utility"]),
           "paper": paper_implied(), "seconds": time.time() - t0}
    return res


ROWS = (("entropy at sampled multi-action states (nats)", "sampled/multi/entropy", None),
        ("top-label probability there", "sampled/multi/top", None),
        ("entropy at greedy multi-action states", "greedy/multi/entropy", None),
        ("top-label probability there", "greedy/multi/top", None),
        ("entropy at sampled >= 3-action states", "sampled/multi3/entropy", None),
        ("VinePPO newly scored decisions / state", "vine/newly_scored_per_state",
         "vine_newly_scored_per_state"),
        ("VinePPO T_env / state", "vine/t_env_per_state", "vine_t_env_per_state"),
        ("AgentUCT T_env / state", "agentuct/t_env_per_state", "agentuct_t_env_per_state"),
        ("Uniform T_env / state", "uniform/t_env_per_state", "uniform_t_env_per_state"),
        ("centring sign changes, >= 3 actions (Uniform)", "uniform/sign_change_rate",
         "sign_change_rate"),
        ("utility of the sampled training episodes", "sampled/utility", None),
        ("held-out utility (greedy, test)", "held_out/utility", None),
        ("Base (default workflow)", "base/utility", None))


def to_markdown(res: Dict[str, Any]) -> str:
    lines = [f"warm start {res['name']} (label_smoothing {res['label_smoothing']}); "
             f"{res['episodes']} training questions, {res['held_out_episodes']} test",
             "", "| measure | this warm start | the paper |", "|---|--:|--:|"]
    for label, k, pk in ROWS:
        paper = f"{res['paper'][pk]:.4g}" if pk else "-"
        lines.append(f"| {label} | {res[k]:.4g} | {paper} |")
    return "\n".join(lines) + "\n"


def parse_sets(items) -> Dict[str, Any]:
    """["a.b=1", ...] -> {"a.b": 1}: values read as Python literals, else strings."""
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise ConfigError("set", f"{item!r}: expected field=value", "field=value, ...")
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


def main(a):
    """Measures the regime of `a` (experiments/configs/studies/asct_regime.py)."""
    if not a.name:
        raise ConfigError("name", "missing", "results/asct_regime/<name>.{json,md}")
    res = run(parse_sets(a.set), a.episodes, trained=a.trained)
    atomic_write_json(os.path.join(a.out, a.name + ".json"), res)
    md = to_markdown(res)
    atomic_write_text(os.path.join(a.out, a.name + ".md"), md)
    print(md, flush=True)


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
