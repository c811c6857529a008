"""The search's leaf evaluation: continuations, ONE episode played on from a tree leaf to
its end (`continue_episode`, `evaluate_leaf`), and the policies that choose their steps
(the `continuation` of SearchRules).

A continuation rule is `(model, table, state, cands [K, A], legal [K]) -> (logits [K],
actor_tokens [] f32, decided [] i32)`: the log-weights the step's candidate is drawn from
(restricted to the legal ones, rollout_value.sample_candidate), the actor-scoring tokens
of that decision (search.accounting) and the workflow node whose actor decision it is
(-1 for a rule: nothing to score). table: the tree's T_hat table [P, K] or None
(cache.state_t_hat).

  actor_continuation          a ~ pi_old(. | s)     (ASCT-ActorRollout, VinePPO)
  uniform_continuation        a ~ U(legal)          (Uniform, UCT)
  cost_weighted_continuation  P(a) ~ exp(-c_tok T_hat(s, a))   (AgentUCT)
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.search import accounting
from asct_jax.search.cache import state_t_hat
from asct_jax.search.rollout_value import sample_candidate, state_done
from asct_jax.search.tree import Tree
from asct_jax.search.types import ContinuationFn, Cost, EnvModel, Trace, empty_trace
from asct_jax.search.workflow import workflow_of


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
    return jnp.zeros(legal.shape, jnp.float32), jnp.float32(0.0), jnp.int32(-1)


def cost_weighted_continuation(model: EnvModel, table, state, cands, legal, c_tok=1e-4):
    """P(a) ~ exp(-c_tok T_hat(s, a)) over the legal a, no actor decision."""
    del cands, legal
    logits = -c_tok * state_t_hat(model, table, state)                     # log P ~ -c_tok T_hat
    return logits, jnp.float32(0.0), jnp.int32(-1)


class _Play(NamedTuple):
    """lax.while_loop state of one continuation ([] unless noted)."""

    state: Any
    ret: chex.Array      # f32, rewards so far
    tokens: chex.Array   # f32, env tokens of every step
    actor: chex.Array    # f32, actor-scoring tokens
    calls: chex.Array    # i32, steps
    trace: Trace         # [L] the steps' ledger entries
    t: chex.Array        # i32
    done: chex.Array     # bool
    key: chex.PRNGKey


def continue_episode(model: EnvModel, continuation: ContinuationFn, state: Any,
                     key: chex.PRNGKey, table: Optional[chex.Array]
                     ) -> Tuple[chex.Array, Cost, Trace]:
    """ONE continuation from `state` to the end of the episode (at most L = env.max_turns
    steps), each step drawn by `continuation` (a rule above; table: [P, K] or None).

    Returns (G = sum of rewards [] f32, Cost [] of every step (env_tokens, env_calls,
    actor_tokens), Trace [L]).
    """
    env, p = model.env, model.env_params
    horizon = int(env.max_turns)
    workflow = workflow_of(env, p) is not None

    def body(c: _Play) -> _Play:
        key, sub = jax.random.split(c.key)
        cands, legal = env.legal_actions(c.state, p)
        logits, actor, decided = continuation(model, table, c.state, cands, legal)
        a = sample_candidate(sub, logits, legal)
        cost = jnp.asarray(env.action_costs(c.state, p), jnp.float32)[a]
        s, ts = env.step(c.state, cands[a], p)
        prefix = env.workflow_node(s, p) if workflow else jnp.int32(0)
        trace = Trace(c.trace.prefix.at[c.t].set(jnp.asarray(prefix, jnp.int32)),
                      c.trace.tokens.at[c.t].set(cost), c.trace.valid.at[c.t].set(True),
                      c.trace.decided.at[c.t].set(decided), c.trace.actor.at[c.t].set(actor))
        return _Play(s, c.ret + ts.reward, c.tokens + cost, c.actor + actor, c.calls + 1,
                     trace, c.t + 1, jnp.asarray(ts.done, bool), key)

    empty = empty_trace(horizon)
    init = _Play(state, jnp.float32(0.0), jnp.float32(0.0), jnp.float32(0.0), jnp.int32(0),
                 empty, jnp.int32(0), state_done(env, state, p), key)
    c = jax.lax.while_loop(lambda c: ~c.done & (c.t < horizon), body, init)
    return c.ret.astype(jnp.float32), Cost(c.tokens, c.calls, c.actor), c.trace


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
            Cost(*(jnp.sum(x, 0) for x in cost)), jax.tree.map(lambda x: x.reshape(-1), trace))


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
