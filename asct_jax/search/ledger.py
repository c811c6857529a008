"""The ASCT paper's token ledger of one training iteration (its Table 3), as credit metrics
of ASCT's and VinePPO's methods (search.methods): T_aux split by category, the actor's
scoring by purpose, in every unit of search.scoring.ACTOR_UNITS, and J_search (Eq. 5).

Metric names (logged as credit/<name>; trainer._summary totals them as total/<name>):
  ledger/env/<part>                   t_env by env.cost_parts (ragspace: generator_input,
                                      generator_output, query_embedding, reranker_input)
  ledger/continuations/<unit>         actor scoring of auxiliary continuations (in T_aux)
  ledger/continuation_decisions       the continuation decisions charged
  ledger/main_trajectory/<unit>       actor scoring of the batch's own decisions not scored
                                      before in the iteration (the paper: "charged once to
                                      the first requesting path"; continuations first)
  ledger/main_decisions               the decisions charged there
  ledger/optimizer_pass/<unit>        one forward over every decision of the batch (the
                                      optimizer forwards = ppo.epochs x this, trainer)
  ledger/decisions                    the batch's decisions (actor states)
  j_search                            (sum_i U(w_i) - beta T_aux) / K            (Eq. 5)
Tokens per actor state: ledger/optimizer_pass/<unit> / ledger/decisions.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.rl.credit import CreditContext
from asct_jax.rl.types import Rollout
from asct_jax.search.accounting import charge
from asct_jax.search.cache import ExecutionCache
from asct_jax.search.scoring import ACTOR_UNITS, ChatLengths, decision_tokens
from asct_jax.search.workflow import workflow_of

# J_search's token weight (the paper's beta = 1e-4 per auxiliary token, Eq. 5).
BETA_REPORT = 1e-4


def units_logged(chat: Optional[ChatLengths]):
    """The units with a count: every one with the chat tables, else "words" alone."""
    return ACTOR_UNITS if chat is not None else ("words",)


def j_search(out, live: chex.Array, t_aux: chex.Array) -> Tuple[chex.Array, chex.Array]:
    """(J_search [], the mean trial utility []) of searched states `live` [B]: K = their
    trials, sum_i U(w_i) = sum over states of the mean trial utility x its trials;
    J = (sum U - beta T_aux) / K."""
    trials = jnp.where(live, jnp.sum(out.visits, -1), 0).astype(jnp.float32)
    k = jnp.maximum(jnp.sum(trials), 1.0)
    utility_sum = jnp.sum(jnp.where(live, out.search_value, 0.0) * trials)
    return (utility_sum - BETA_REPORT * t_aux) / k, utility_sum / k          # Eq. 5


def decision_units(ctx: CreditContext, chat: Optional[ChatLengths], batch: Rollout
                   ) -> chex.Array:
    """[B, T, U] f32: the scoring tokens of every stored decision state of the batch
    (search.scoring.decision_tokens; 0 where the turn is not real)."""
    env, p = ctx.env, ctx.env_params

    def one(state):
        cands, legal = env.legal_actions(state, p)
        return decision_tokens(env.observe(state, p), cands, jnp.asarray(legal, bool), chat)

    units = jax.vmap(jax.vmap(one))(batch.states)
    return jnp.where(batch.turn_mask[..., None], units, 0.0)


def main_trajectory(ctx: CreditContext, batch: Rollout, cache: Optional[ExecutionCache]
                    ) -> Tuple[Optional[ExecutionCache], chex.Array]:
    """(the cache with the batch's decisions marked scored, charged [B, T] bool): with an
    execution cache each (question, prefix) is charged once per iteration and not if a
    continuation scored it first (the cache's "scored" table); without one every real
    turn is charged."""
    mask = batch.turn_mask
    if cache is None or workflow_of(ctx.env, ctx.env_params) is None:
        return cache, mask
    env, p = ctx.env, ctx.env_params
    node = jax.vmap(jax.vmap(lambda s: env.workflow_node(s, p)))(batch.states)
    qid = jax.vmap(lambda s: env.question_id(s, p))(
        jax.tree.map(lambda x: x[:, 0], batch.states))
    return charge(cache, qid.astype(jnp.int32), node.astype(jnp.int32), mask, table="scored")


def ledger_metrics(ctx: CreditContext, chat: Optional[ChatLengths], out, live: chex.Array,
                   batch: Rollout, cache: Optional[ExecutionCache]
                   ) -> Tuple[Optional[ExecutionCache], Dict[str, chex.Array]]:
    """(the cache after the main trajectory's scoring, the ledger's metrics) of one
    iteration: `out` the SearchOutput of its searched states `live` [B'] (B' = the flat
    roots), `batch` its rollout (module docstring)."""
    m: Dict[str, chex.Array] = {}
    for i, part in enumerate(ctx.env.cost_parts):
        m[f"ledger/env/{part}"] = jnp.sum(jnp.where(live, out.env_parts[:, i], 0.0))
    units = decision_units(ctx, chat, batch)
    cache, charged = main_trajectory(ctx, batch, cache)
    for u in units_logged(chat):
        j = ACTOR_UNITS.index(u)
        m[f"ledger/continuations/{u}"] = jnp.sum(jnp.where(live, out.actor_units[:, j], 0.0))
        m[f"ledger/main_trajectory/{u}"] = jnp.sum(jnp.where(charged, units[..., j], 0.0))
        m[f"ledger/optimizer_pass/{u}"] = jnp.sum(units[..., j])
    m["ledger/continuation_decisions"] = jnp.sum(
        jnp.where(live, out.actor_decisions, 0)).astype(jnp.float32)
    m["ledger/main_decisions"] = jnp.sum(charged).astype(jnp.float32)
    m["ledger/decisions"] = jnp.sum(batch.turn_mask).astype(jnp.float32)
    return cache, m
