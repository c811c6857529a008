"""The substrate's baseline credit methods: trajectory-return PPO, PPO with GAE, GRPO, GiGPO.

Each is a `Method` record (asct_jax.rl.credit); experiments/registry.py lists them with
the ASCT and FACTOR methods. Equations: docs/methods.md, "Baselines".
"""
from __future__ import annotations

import jax.numpy as jnp

from asct_jax.rl import advantages as adv
from asct_jax.rl.credit import (Credit, CreditContext, CreditFn, Method, Rollout,
                                from_turn_advantages, value_targets_mc)


RETURN_BASELINES = ("critic", "none")   # config.ppo.return_baseline of ppo_return


def _ppo_return(config, ctx: CreditContext) -> CreditFn:
    """Trajectory-return PPO: A_t = G_t - V(x_t) (return-to-go minus the critic;
    `config.ppo.return_baseline = "none"` uses the raw return-to-go)."""
    use_critic = config.ppo.return_baseline == "critic"

    def credit(params, batch: Rollout, key, step) -> Credit:
        g = adv.returns_to_go(batch.rewards, batch.turn_mask)
        a = g - batch.values if use_critic else g
        return from_turn_advantages(batch, a, g)
    return credit


def _ppo_gae(config, ctx: CreditContext) -> CreditFn:
    """PPO with GAE(gamma, lambda) over turns and the critic."""

    def credit(params, batch: Rollout, key, step) -> Credit:
        a, targets = adv.gae(batch.rewards, batch.values, batch.turn_mask,
                             config.ppo.gamma, config.ppo.gae_lambda)
        return from_turn_advantages(batch, a, targets)
    return credit


def _grpo(config, ctx: CreditContext) -> CreditFn:
    """GRPO: A_i = (G_i - mean_group G) / (std_group G + eps) on every token of episode i."""

    def credit(params, batch: Rollout, key, step) -> Credit:
        g = adv.episode_returns(batch.rewards, batch.turn_mask)
        a = adv.grpo_advantages(g, ctx.group_size)
        per_turn = jnp.broadcast_to(a[:, None], batch.turn_mask.shape)
        return from_turn_advantages(batch, per_turn, value_targets_mc(batch))
    return credit


def _gigpo(config, ctx: CreditContext) -> CreditFn:
    """GiGPO: GRPO's episode advantage plus omega times the anchor-state advantage of each
    turn (`adv.gigpo_advantages`, `config.gigpo`: gamma, omega, normalise)."""
    cfg = config.gigpo
    gamma, omega, normalise = float(cfg.gamma), float(cfg.omega), cfg.normalise

    def credit(params, batch: Rollout, key, step) -> Credit:
        a = adv.gigpo_advantages(batch.rewards, batch.obs, batch.turn_mask, ctx.group_size,
                                 gamma=gamma, omega=omega, normalise=normalise)
        return from_turn_advantages(batch, a, value_targets_mc(batch))
    return credit


PPO_RETURN = Method("ppo_return", _ppo_return)
PPO_GAE = Method("ppo_gae", _ppo_gae)
GRPO = Method("grpo", _grpo)
GIGPO = Method("gigpo", _gigpo)
METHODS = (PPO_RETURN, PPO_GAE, GRPO, GIGPO)
