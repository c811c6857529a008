"""The substrate's baseline credit methods: trajectory-return PPO, PPO with GAE, GRPO, GiGPO.

Each is a `Method` record (asct_jax.rl.credit) with its typed config; experiments/
registry.py lists them with the ASCT and FACTOR methods. Equations: docs/methods.md,
"Baselines".
"""
from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp

from asct_jax.infra.checks import Range
from asct_jax.infra.typed_config import from_section, option
from asct_jax.rl import advantages as adv
from asct_jax.rl.protocol import ASCT, SUBSTRATE, VERL
from asct_jax.rl.credit import (Credit, CreditContext, CreditFn, Method, Rollout,
                                from_turn_advantages, value_targets_mc)


RETURN_BASELINES = ("critic", "none")   # config.ppo.return_baseline of ppo_return


@dataclasses.dataclass(frozen=True)
class ReturnConfig:
    """ppo_return's fields (section ppo)."""

    return_baseline: str = option(RETURN_BASELINES, "critic: G_t - V(x_t); none: G_t")


@dataclasses.dataclass(frozen=True)
class GAEConfig:
    """ppo_gae's fields (section ppo)."""

    gamma: float = option(Range(0.0, 1.0), "discount over turns")
    gae_lambda: float = option(Range(0.0, 1.0), "GAE lambda")


@dataclasses.dataclass(frozen=True)
class GiGPOConfig:
    """GiGPO's fields (section gigpo); names and defaults as verl-agent's algorithm.gigpo."""

    gamma: float = option(Range(0.0, 1.0), "discount of the step return R_t in the anchor term")
    omega: float = option(Range(0.0, None), "weight of the anchor-state (step) advantage")
    mode: str = option(adv.GIGPO_MODES, "mean_norm: x - mean; mean_std_norm: (x - mean) / "
                                        "(std + 1e-6), in both terms")
    episode_stats: str = option(adv.GIGPO_EPISODE_STATS,
                                "samples of the episode term's mean / std: steps (one per "
                                "real turn, theirs) or episodes (one per episode)")


def _ppo_return(cfg: ReturnConfig, ctx: CreditContext) -> CreditFn:
    """Trajectory-return PPO: A_t = G_t - V(x_t) (return-to-go minus the critic;
    `return_baseline = "none"` uses the raw return-to-go)."""
    use_critic = cfg.return_baseline == "critic"

    def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
        g = adv.returns_to_go(batch.rewards, batch.turn_mask)
        a = g - batch.values if use_critic else g
        return from_turn_advantages(batch, a, g)
    return credit


def _ppo_gae(cfg: GAEConfig, ctx: CreditContext) -> CreditFn:
    """PPO with GAE(gamma, lambda) over turns and the critic."""

    def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
        a, targets = adv.gae(batch.rewards, batch.values, batch.turn_mask, cfg.gamma,
                             cfg.gae_lambda)
        return from_turn_advantages(batch, a, targets)
    return credit


def _grpo(cfg: None, ctx: CreditContext) -> CreditFn:
    """GRPO: A_i = (G_i - mean_group G) / (std_group G + eps) on every token of episode i."""

    def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
        g = adv.episode_returns(batch.rewards, batch.turn_mask)
        a = adv.grpo_advantages(g, ctx.group_size)
        per_turn = jnp.broadcast_to(a[:, None], batch.turn_mask.shape)
        return from_turn_advantages(batch, per_turn, value_targets_mc(batch))
    return credit


def _gigpo(cfg: GiGPOConfig, ctx: CreditContext) -> CreditFn:
    """GiGPO: the group-relative episode advantage (statistics over the group's turn
    samples by default) plus omega times the anchor-state advantage of each turn
    (`adv.gigpo_advantages`, verl-agent's compute_gigpo_outcome_advantage)."""
    gamma, omega = float(cfg.gamma), float(cfg.omega)

    def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
        a = adv.gigpo_advantages(batch.rewards, batch.obs, batch.turn_mask, ctx.group_size,
                                 gamma=gamma, omega=omega, mode=cfg.mode,
                                 episode_stats=cfg.episode_stats)
        return from_turn_advantages(batch, a, value_targets_mc(batch))
    return credit


# The ASCT paper's PPO baselines share its learning protocol: credit standardised within
# the iteration (App. A.2), as PPO implementations whiten their advantages.
PPO_RETURN = Method("ppo_return", _ppo_return, protocol=ASCT,
                    make_config=functools.partial(from_section, ReturnConfig, section="ppo"))
PPO_GAE = Method("ppo_gae", _ppo_gae, protocol=SUBSTRATE,
                 make_config=functools.partial(from_section, GAEConfig, section="ppo"))
GRPO = Method("grpo", _grpo, protocol=VERL)
GIGPO = Method("gigpo", _gigpo, protocol=VERL,
               make_config=functools.partial(from_section, GiGPOConfig, section="gigpo"))
METHODS = (PPO_RETURN, PPO_GAE, GRPO, GIGPO)
