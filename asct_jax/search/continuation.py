"""The search's leaf evaluation: continuations, ONE episode played on from a tree leaf to
its end (`continue_episode`, `evaluate_leaf`), and the policies that choose their steps
(the `continuation` of SearchRules).

A continuation rule is `(model, table, state, cands [K, A], legal [K]) -> (logits [K],
actor_tokens [U] f32, decided [] i32)`: the log-weights the step's candidate is drawn from
(restricted to the legal ones, envs.play.sample_candidate), the actor-scoring tokens
of that decision in every unit (search.accounting; 0 for a rule) and the workflow node
whose actor decision it is
(-1 for a rule: nothing to score). table: the tree's T_hat table [P, K] or None
(cache.state_t_hat).

  actor_continuation          a ~ pi_old(. | s)     (ASCT-ActorRollout, VinePPO)
  uniform_continuation        a ~ U(legal)          (Uniform, UCT)
  cost_weighted_continuation  P(a) ~ exp(-c_tok T_hat(s, a))   (AgentUCT)
"""
from __future__ import annotations

import functools
from typing import Any, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.play import Choice, Recorder, StateActor, play_from, sample_candidate
from asct_jax.search import accounting
from asct_jax.search.cache import state_t_hat
from asct_jax.search.scoring import ACTOR_UNITS
from asct_jax.search.tree import Tree
from asct_jax.search.types import ContinuationFn, Cost, EnvModel, Trace, empty_trace
from asct_jax.search.workflow import workflow_of


def _no_scoring() -> chex.Array:
    """[U] f32 zeros: a rule's decision scores nothing (built when traced, not at import:
    no JAX computation before jax.distributed joins the processes)."""
    return jnp.zeros((len(ACTOR_UNITS),), jnp.float32)


def _decision_node(model: EnvModel, state: Any) -> chex.Array:
    """int32 []: the workflow node of an actor decision at `state` (0 without a workflow)."""
    env, p = model.env, model.env_params
    return (jnp.asarray(env.workflow_node(state, p), jnp.int32)
            if workflow_of(env, p) is not None else jnp.int32(0))


def actor_continuation(model: EnvModel, table, state, cands, legal):
    """a ~ pi_old(. | s): policy_fn's logits; its scoring tokens are charged."""
    del table
    logits, _ = model.policy_fn(state)
    actor = accounting.actor_scoring_tokens(model, state, cands, legal)
    return logits, actor, _decision_node(model, state)


def uniform_continuation(model: EnvModel, table, state, cands, legal):
    """a ~ U(legal): equal logits, no actor decision."""
    del model, table, state, cands
    return jnp.zeros(legal.shape, jnp.float32), _no_scoring(), jnp.int32(-1)


def cost_weighted_continuation(model: EnvModel, table, state, cands, legal, c_tok=1e-4):
    """P(a) ~ exp(-c_tok T_hat(s, a)) over the legal a, no actor decision."""
    del cands, legal
    logits = -c_tok * state_t_hat(model, table, state)                     # log P ~ -c_tok T_hat
    return logits, _no_scoring(), jnp.int32(-1)


def rule_actor(model: EnvModel, continuation: ContinuationFn,
               table: Optional[chex.Array]) -> StateActor:
    """A continuation rule as a StateActor (envs.play): a ~ the rule's logits over the legal
    candidates, the action's env tokens counted; Choice.extra holds the decision's actor
    tokens and node (actor [U] f32, decided [] i32) and the action's env tokens by
    category (parts [C] f32)."""
    env, p = model.env, model.env_params

    def act(state, key, carry):
        cands, legal = env.legal_actions(state, p)
        logits, actor, decided = continuation(model, table, state, cands, legal)
        a = sample_candidate(key, logits, legal)
        cost = jnp.asarray(env.action_costs(state, p), jnp.float32)[a]
        parts = jnp.asarray(env.action_cost_parts(state, p), jnp.float32)[a]
        return Choice(response=cands[a], index=a, penalty=jnp.float32(0.0), tokens=cost,
                      extra={"actor": actor, "decided": decided, "parts": parts}), carry

    return StateActor(init=lambda state: (), act=act)


def trace_recorder(model: EnvModel, horizon: int) -> Recorder:
    """A Recorder of the Trace [L = horizon]: turn t's ledger entry, the workflow node it
    reaches (0 without a workflow), its env tokens (by category) and the decision of
    rule_actor's Choice.extra."""
    env, p = model.env, model.env_params
    workflow = workflow_of(env, p) is not None

    def update(tr, t, choice, turn):
        x = choice.extra
        prefix = env.workflow_node(turn.state, p) if workflow else jnp.int32(0)
        return Trace(tr.prefix.at[t].set(jnp.asarray(prefix, jnp.int32)),
                     tr.tokens.at[t].set(choice.tokens), tr.valid.at[t].set(True),
                     tr.decided.at[t].set(x["decided"]), tr.actor.at[t].set(x["actor"]),
                     tr.parts.at[t].set(x["parts"]))

    return Recorder(init=lambda: empty_trace(horizon, len(env.cost_parts)), update=update)


def continue_episode(model: EnvModel, continuation: ContinuationFn, state: Any,
                     key: chex.PRNGKey, table: Optional[chex.Array]
                     ) -> Tuple[chex.Array, Cost, Trace]:
    """ONE continuation from `state` to the end of the episode (at most L = env.max_turns
    steps), each step drawn by `continuation` (a rule above; table: [P, K] or None):
    envs.play.play_from with rule_actor, recording the ledger's Trace.

    Returns (G = sum of rewards [] f32, Cost [] of every step (env_tokens, env_calls,
    actor_tokens [U], env_parts [C], actor_decisions), Trace [L]).
    """
    horizon = int(model.env.max_turns)
    out = play_from(model.env, model.env_params, rule_actor(model, continuation, table),
                    state, key, horizon, recorder=trace_recorder(model, horizon))
    tr = out.rec
    decided = tr.valid & (tr.decided >= 0)
    cost = Cost(out.tokens, out.calls, jnp.sum(jnp.where(tr.valid[:, None], tr.actor, 0.0), 0),
                jnp.sum(jnp.where(tr.valid[:, None], tr.parts, 0.0), 0),
                jnp.sum(decided).astype(jnp.int32))
    return out.ret.astype(jnp.float32), cost, tr


# ---------------------------------------------------------------- leaf evaluation
def _evaluate_leaf_one(tree: Tree, leaf, key, table, *, model: EnvModel,
                       continuation: ContinuationFn, num_rollouts: int):
    """ONE tree: the mean return of `num_rollouts` continuations from the leaf's state
    (0 if terminal) -> (value [] f32, Cost [] summed, Trace [M * L])."""
    lstate = jax.tree.map(lambda x: x[leaf], tree.states)
    keys = jax.random.split(key, num_rollouts)
    g, cost, trace = jax.vmap(lambda k: continue_episode(model, continuation, lstate, k,
                                                         table))(keys)
    v = jnp.mean(g)
    return (jnp.where(tree.terminal[leaf], 0.0, v).astype(jnp.float32),
            Cost(*(jnp.sum(x, 0) for x in cost)),
            jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), trace))   # [M * L, ...]


def evaluate_leaf(keys: chex.PRNGKey, tree: Tree, leaf: chex.Array, model: EnvModel,
                  continuation: ContinuationFn, num_rollouts: int = 1,
                  table: Optional[chex.Array] = None) -> Tuple[chex.Array, Cost, Trace]:
    """Value of node `leaf` of every tree (0 if terminal): the mean return of
    `num_rollouts` continuations to the end of the episode by `continuation`.

    Args:
      keys: [B] PRNG keys; tree: the batched Tree; leaf: [B] i32; model: EnvModel;
      continuation: a continuation rule (search.continuation; static);
      num_rollouts: M (static); table: [B, P, K] T_hat tables or None (remaining_costs).

    Returns:
      (value [B] f32, Cost [B] of the continuations' steps, Trace [B, M * L] of them).
    """
    chex.assert_shape(leaf, (tree.batch_size,))
    return jax.vmap(functools.partial(_evaluate_leaf_one, model=model,
                                      continuation=continuation, num_rollouts=num_rollouts)
                    )(tree, leaf, keys, table)
