"""One credit interface, and the record that names a method.

A credit method turns a rollout batch into per-token coefficients C [B, T, A] for the
clipped policy loss, value targets for the critic, and its own cost metrics:

    method.make_credit(config, ctx) -> credit_fn(params, batch, key, step) -> Credit

`params` are the behaviour parameters (pi_old, frozen for the update), `step` the train
step (a traced int32, for schedules), `ctx` carries the static pieces a method may need
(policy, environment, group size). The train step calls credit_fn without knowing which
method it runs. Each package lists its methods as `Method` records next to their kernels
(asct_jax.rl.methods, asct_jax.search.methods, factor_jax.methods); the one registry that
maps names to them is experiments/registry.py, filled by explicit imports.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

import jax
import jax.numpy as jnp

from asct_jax.rl import advantages as adv
from asct_jax.rl.types import Credit, Rollout

CreditFn = Callable[[Any, Rollout, Any, Any], Credit]


@dataclasses.dataclass(frozen=True)
class CreditContext:
    """Static things a credit method may need."""

    policy: Any  # asct_jax.rl.policy.Policy
    env: Any
    env_params: Any
    group_size: int
    # The vmapped axis of seeds trained as one program (trainer.train_seeds), or None. A
    # data-dependent skip (lax.cond) must reduce its predicate over it to stay a skip.
    seed_axis: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Method:
    """A registered credit method and what it needs from where the rollouts come from.

    name: the value of `config.method`.
    make_credit: (config, ctx) -> credit_fn.
    restores_states_in_step: the credit restores environment states inside the jitted
      step (search, VinePPO rollouts, in-step value calibration), so it needs a JAX-native
      environment; host games cannot serve it.
    host_calibration: what host games run between the rollout and the learn step in
      place of the restores the credit makes in-step on JAX environments:
      (config, play_from, batch, host_states, key, chunk) -> Rollout.calibration or None
      (FACTOR's value calibration: factor_jax.host_calibration.calibrate_on_host).
    """

    name: str
    make_credit: Callable[[Any, CreditContext], CreditFn]
    restores_states_in_step: bool = False
    host_calibration: Optional[Callable[..., Any]] = None


def zero_cost_metrics() -> Dict[str, Any]:
    return {"aux_tokens": jnp.float32(0.0), "env_calls": jnp.float32(0.0)}


def from_turn_advantages(batch: Rollout, advantages, value_targets, metrics=None,
                         teacher_logp=None) -> Credit:
    """Credit whose coefficient is one advantage per turn, broadcast to its tokens."""
    coef = adv.broadcast_to_tokens(advantages * batch.turn_mask, batch.token_mask)
    return Credit(coef=coef, value_targets=value_targets, teacher_logp=teacher_logp,
                  metrics=metrics if metrics is not None else zero_cost_metrics())


def value_targets_mc(batch: Rollout):
    """Critic target: the undiscounted return-to-go from x_t (Monte-Carlo)."""
    return adv.returns_to_go(batch.rewards, batch.turn_mask)


def any_over_seeds(x, ctx: CreditContext):
    """jnp.any(x), made the same for every seed of a seed batch (so lax.cond stays a
    branch under vmap instead of becoming a select that computes both sides)."""
    anything = jnp.any(x)
    if ctx.seed_axis is None:
        return anything
    return jax.lax.psum(anything.astype(jnp.int32), ctx.seed_axis) > 0


def state_policy_fn(ctx: CreditContext, params):
    """pi_old and the critic at ONE environment state: state -> (logp [K], value []).

    The form the search, VinePPO and value calibration consume (vmapped by them).
    """
    env, env_params, policy = ctx.env, ctx.env_params, ctx.policy

    def fn(state):
        obs = env.observe(state, env_params)
        cands, legal = env.legal_actions(state, env_params)
        cand_logp, _, value = policy.candidate_log_probs(params, obs[None], cands[None],
                                                         legal[None])
        return cand_logp[0], value[0]
    return fn


def turn_states(batch: Rollout, turns):
    """The stored env states at chosen turns: turns [B, S] int -> pytree [B, S, ...]."""
    return jax.tree.map(
        lambda x: jnp.take_along_axis(
            x, turns.reshape(turns.shape + (1,) * (x.ndim - 2)), axis=1), batch.states)
