"""The method contract: what a credit method is, in one record.

A credit method turns a rollout batch into per-token coefficients C [B, T, A] for the
clipped policy loss, value targets for the critic and its own cost metrics; it may add
an auxiliary loss and keep state across steps:

    cfg      = method.make_config(config)             # typed, frozen; validated here
    credit   = method.make_credit(cfg, ctx)           # (params, batch, key, step, mstate) -> Credit
    pg_loss  = method.make_policy_loss(cfg, ctx)      # None (the clipped surrogate), or
                                                      #   (out, mb, credit_mb, ppo) -> (loss, m)
    aux_loss = method.make_aux_loss(cfg, ctx)         # None, or (out, mb, credit_mb) -> (loss, m)
    reduce   = method.make_dist_reduce(cfg, ctx)      # None, or DistReduce(fn, inputs): what
                                                      #   the update's pass reduces (out.reduced)
    mstate   = method.init_state(cfg, ctx, params, key)                       # or None
    mstate, m = method.update_state(cfg, ctx, mstate, StateInputs(...))       # after the update
    prefit   = method.make_prefit(cfg, ctx)           # None, or (params, mstate, key, collect)
                                                      #   -> (mstate, m): before step 1

`params` are the behaviour parameters (pi_old, frozen for the update), `step` the train
step (a traced int32, for schedules), `mstate` the method's state (None for stateless
methods), `ctx` the static pieces a method may need (policy, environment, group size).
The train state carries `mstate` (TrainState.method_state): orbax checkpoints and
restores it, train_seeds stacks it per seed, FSDP shards it like the parameters. The
train step calls these without knowing which method it runs. Each package lists its
methods as `Method` records next to their kernels (asct_jax.rl.methods,
asct_jax.search.methods, factor_jax.methods); experiments/harness/registry.py maps names to them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.infra.typed_config import no_config
from asct_jax.rl import actor
from asct_jax.rl import advantages as adv
from asct_jax.rl.protocol import SUBSTRATE, Protocol
from asct_jax.rl.types import Credit, Rollout

# (params, batch, key, step, method_state) -> Credit
CreditFn = Callable[..., Credit]
# (out: asct_jax.rl.policy.TokenOutputs [b, T, ...] of the current parameters, minibatch
#  Rollout, its Credit) -> (loss to minimise, metrics)
AuxLossFn = Callable[[Any, Rollout, Credit], Tuple[Any, Dict[str, Any]]]
# (out, mb, credit_mb, ppo: asct_jax.rl.protocol.Protocol) -> (policy loss to minimise, metrics)
PolicyLossFn = Callable[[Any, Rollout, Credit, Any], Tuple[Any, Dict[str, Any]]]
# (params, method_state, key, collect: (params, key) -> Rollout of one training batch)
#  -> (method_state, metrics with at least "env_calls" and "aux_tokens")
PrefitFn = Callable[..., Tuple[Any, Dict[str, Any]]]


@dataclasses.dataclass(frozen=True)
class DistReduce:
    """A reduction a method's losses read from the update's own pass, per action token:
    the pass applies fn to the current parameters' next-token distribution at each
    position (a chunk of rows at a time over a full vocabulary, never the whole
    [N, R, V]: asct_jax.rl.policy.DistReduce) and returns it as TokenOutputs.reduced
    (FACTOR's forward KL).

    fn: (dist_logp [..., K, A], support [..., K, A] bool, inputs) -> [..., A].
    inputs: credit_mb -> a pytree of [b, T, ...] arrays in the policy's distribution
      layout (Policy.distributions), e.g. a constant distribution in the credit's
      loss_inputs.
    """

    fn: Callable[..., Any]
    inputs: Callable[[Credit], Any]


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


@chex.dataclass(frozen=True)
class StateInputs:
    """What `Method.update_state` sees after the PPO update of one step.

    params: the policy parameters after the update (join_params form); behaviour_params:
    pi_old's (before it); batch: the step's Rollout; credit: its Credit; key: a PRNG key
    of the state update; step: [] int32, the step that was taken (before the increment).
    """

    params: Any
    behaviour_params: Any
    batch: Rollout
    credit: Credit
    key: Any
    step: Any


def _no_aux_loss(cfg: Any, ctx: CreditContext) -> Optional[AuxLossFn]:
    return None


def _default_policy_loss(cfg: Any, ctx: CreditContext) -> Optional[PolicyLossFn]:
    return None


def _no_dist_reduce(cfg: Any, ctx: CreditContext) -> Optional[DistReduce]:
    return None


def _no_prefit(cfg: Any, ctx: CreditContext) -> Optional[PrefitFn]:
    return None


@dataclasses.dataclass(frozen=True)
class Method:
    """A registered credit method: the whole contract between it and the substrate.

    name: the value of `config.method`.
    make_config: ConfigDict -> the method's typed, frozen config (asct_jax.infra.
      typed_config.from_section; None for a method that reads no field). Built and
      validated at the experiment edge: a bad value is a ConfigError naming the field.
    make_credit: (cfg, ctx) -> credit_fn(params, batch, key, step, mstate) -> Credit.
    make_policy_loss: (cfg, ctx) -> None (the clipped surrogate on credit.coef, aggregated
      by ppo.aggregation) or pg_loss(out, mb, credit_mb, ppo) -> (loss, metrics) in its place;
      the loss may be given as parts {part: loss}, summed (FACTOR's L_act + L_nonact;
      ppo.term_grad_norms logs each part's norm). `out` is the current parameters'
      TokenOutputs.
    make_aux_loss: (cfg, ctx) -> None or aux_loss(out, mb, credit_mb) -> (loss, metrics),
      added to the PPO loss of every minibatch (reads credit_mb.loss_inputs).
    make_dist_reduce: (cfg, ctx) -> None or a DistReduce the update's pass applies to its
      next-token distributions (out.reduced, read by the losses above).
    init_state: None, or (cfg, ctx, params, key) -> the method's state (a pytree of
      arrays; jit-compatible) at step 0.
    update_state: None, or (cfg, ctx, mstate, StateInputs) -> (mstate, metrics), run in
      the compiled step after the PPO update; metrics are logged as "method/<name>".
    protocol: how its authors update the policy around the credit (asct_jax.rl.protocol:
      epochs, minibatches, clip, regularisers, standardisation, ...); the config's ppo
      fields override it. Default: the substrate's earlier shared recipe.
    restores_states_in_step: the credit restores environment states inside the jitted
      step (search, VinePPO rollouts, in-step value calibration), so it needs a JAX-native
      environment; host games cannot serve it.
    host_prepare: None, or what host games run between the rollout and the learn step in
      place of the restores the credit makes in-step on JAX environments:
      (cfg, play_from, batch, host_states, key, chunk) -> Rollout.extras or None
      (FACTOR's continuations: factor_jax.host_continuations.continue_on_host).
    make_prefit: (cfg, ctx) -> None or prefit(params, mstate, key, collect) -> (mstate,
      metrics): a fit of a stateful method's state before step 1 of a fresh run (a
      resumed run's checkpoint holds it), on batches it draws with collect(params, key)
      (the training rollout of the initial policy); the policy, its optimiser and the
      step counter are untouched. Its metrics are logged at step 0 as "prefit/<name>",
      and its "env_calls" / "aux_tokens" count in the run's totals. Jitted once (vmapped
      over a seed batch); JAX-native environments only.
    """

    name: str
    make_credit: Callable[[Any, CreditContext], CreditFn]
    make_config: Callable[[Any], Any] = no_config
    make_aux_loss: Callable[[Any, CreditContext], Optional[AuxLossFn]] = _no_aux_loss
    make_policy_loss: Callable[[Any, CreditContext], Optional[PolicyLossFn]] = _default_policy_loss
    make_dist_reduce: Callable[[Any, CreditContext], Optional[DistReduce]] = _no_dist_reduce
    init_state: Optional[Callable[..., Any]] = None
    update_state: Optional[Callable[..., Any]] = None
    protocol: Protocol = SUBSTRATE
    restores_states_in_step: bool = False
    host_prepare: Optional[Callable[..., Any]] = None
    make_prefit: Callable[[Any, CreditContext], Optional[PrefitFn]] = _no_prefit

    def __post_init__(self):
        if (self.init_state is None) != (self.update_state is None):
            raise ValueError(f"method {self.name!r}: init_state and update_state come "
                             "together (a stateful method needs both)")

    @property
    def stateful(self) -> bool:
        return self.init_state is not None


def installs_credit_state(cfg: Any, ctx: CreditContext, mstate: Any,
                          inputs: StateInputs) -> Tuple[Any, Dict[str, Any]]:
    """update_state of a method whose credit already made the state's update (returned
    it as Credit.state: the execution cache its searches left, FACTOR's critic)."""
    return inputs.credit.state, {}


def zero_cost_metrics() -> Dict[str, Any]:
    return {"aux_tokens": jnp.float32(0.0), "env_calls": jnp.float32(0.0)}


def from_turn_advantages(batch: Rollout, advantages, value_targets, metrics=None) -> Credit:
    """Credit whose coefficient is one advantage per turn, broadcast to its tokens."""
    coef = adv.broadcast_to_tokens(advantages * batch.turn_mask, batch.token_mask)
    return Credit(coef=coef, value_targets=value_targets,
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
    """pi_old and the critic at ONE environment state: state -> (logp [K], value [])
    (asct_jax.rl.actor.state_scorer on the context's environment and policy).

    The form the search, VinePPO and value calibration consume (vmapped by them).
    """
    return actor.state_scorer(ctx.env, ctx.env_params, ctx.policy, params)


def state_actor(ctx: CreditContext, params):
    """pi_old acting at ONE restored state (envs.play.StateActor,
    asct_jax.rl.actor.state_actor): the generating actor writing its turn
    (actor.writes_at_restored_states), else a candidate sampled from state_policy_fn.
    What VinePPO's rollouts and FACTOR's continuations play."""
    return actor.state_actor(ctx.env, ctx.env_params, ctx.policy, params)


def turn_states(batch: Rollout, turns):
    """The stored env states at chosen turns: turns [B, S] int -> pytree [B, S, ...]."""
    return jax.tree.map(
        lambda x: jnp.take_along_axis(
            x, turns.reshape(turns.shape + (1,) * (x.ndim - 2)), axis=1), batch.states)
