"""One credit interface and its registry.

A credit method turns a rollout batch into per-token coefficients C [B, T, A] for the
clipped policy loss, value targets for the critic, and its own cost metrics:

    make_credit(name, config, ctx) -> credit_fn(params, batch, key, step) -> Credit

`params` are the behaviour parameters (pi_old, frozen for the update), `step` the train
step (a traced int32, for schedules), `ctx` carries the
static pieces a method may need (policy, environment, group size). The train step calls
credit_fn without knowing which method it runs. Methods live next to their kernels and
register themselves with @register("name"); `asct_jax.rl.methods` imports them all.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict

import jax
import jax.numpy as jnp

from asct_jax.rl import advantages as adv
from asct_jax.rl.types import Credit, Rollout

CreditFn = Callable[[Any, Rollout, Any, Any], Credit]
_REGISTRY: Dict[str, Callable[..., CreditFn]] = {}


@dataclasses.dataclass(frozen=True)
class CreditContext:
    """Static things a credit method may need."""

    policy: Any  # asct_jax.rl.policy.Policy
    env: Any
    env_params: Any
    group_size: int


def register(name: str):
    def deco(factory):
        if name in _REGISTRY:
            raise ValueError(f"credit method {name!r} registered twice")
        _REGISTRY[name] = factory
        return factory
    return deco


def available() -> tuple:
    import asct_jax.rl.methods  # noqa: F401  (registers every method)
    return tuple(sorted(_REGISTRY))


def make_credit(name: str, config: Any, ctx: CreditContext) -> CreditFn:
    names = available()
    if name not in _REGISTRY:
        raise ValueError(f"method: unknown credit method {name!r}; allowed: {', '.join(names)}")
    return _REGISTRY[name](config, ctx)


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


@register("ppo_return")
def _ppo_return(config, ctx: CreditContext) -> CreditFn:
    """Trajectory-return PPO: A_t = G_t - V(x_t) (return-to-go minus the critic;
    `config.ppo.return_baseline = "none"` uses the raw return-to-go)."""
    use_critic = config.ppo.return_baseline == "critic"

    def credit(params, batch: Rollout, key, step) -> Credit:
        g = adv.returns_to_go(batch.rewards, batch.turn_mask)
        a = g - batch.values if use_critic else g
        return from_turn_advantages(batch, a, g)
    return credit


@register("ppo_gae")
def _ppo_gae(config, ctx: CreditContext) -> CreditFn:
    """PPO with GAE(gamma, lambda) over turns and the critic."""

    def credit(params, batch: Rollout, key, step) -> Credit:
        a, targets = adv.gae(batch.rewards, batch.values, batch.turn_mask,
                             config.ppo.gamma, config.ppo.gae_lambda)
        return from_turn_advantages(batch, a, targets)
    return credit


@register("grpo")
def _grpo(config, ctx: CreditContext) -> CreditFn:
    """GRPO: A_i = (G_i - mean_group G) / (std_group G + eps) on every token of episode i."""

    def credit(params, batch: Rollout, key, step) -> Credit:
        g = adv.episode_returns(batch.rewards, batch.turn_mask)
        a = adv.grpo_advantages(g, ctx.group_size)
        per_turn = jnp.broadcast_to(a[:, None], batch.turn_mask.shape)
        return from_turn_advantages(batch, per_turn, value_targets_mc(batch))
    return credit


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
