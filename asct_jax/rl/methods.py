"""The substrate's baseline credit methods: trajectory-return PPO, PPO with GAE, GRPO, GiGPO.

Each is a `Method` record (asct_jax.rl.credit) with its typed config; experiments/
registry.py lists them with the ASCT and FACTOR methods. Equations: docs/methods.md,
"Baselines".
"""
from __future__ import annotations

import dataclasses
import functools

from asct_jax.infra.checks import Range
from asct_jax.infra.typed_config import from_section, option
from asct_jax.rl import advantages as adv
from asct_jax.rl import group_advantages as gadv
from asct_jax.rl.protocol import SUBSTRATE, Protocol
from asct_jax.rl.credit import (Credit, CreditContext, CreditFn, Method, Rollout,
                                from_turn_advantages, value_targets_mc)


# The authors' protocols of these methods (asct_jax.rl.protocol.Protocol; docs/methods.md,
# "Learner protocols", cites each value's file).
# verl-agent's GRPO / GiGPO scripts: actor.ppo_mini_batch_size 256 step samples,
# ppo_epochs 1, clip_ratio 0.2, clip_ratio_c 3, entropy_coeff 0.001, use_kl_loss
# with kl_loss_coef 0.01 and low_var_kl (clamped to +-10), optim lr 1e-6 with AdamW's
# weight decay 0.01, grad_clip 1.0, loss_agg_mode token-mean, no warm-up, no critic.
VERL = Protocol(
    epochs=1, minibatches=1, minibatch_size=256, minibatch_unit="steps", clip_eps=0.2,
    dual_clip=3.0, lr_scale=1.0, warmup_steps=0, max_grad_norm=1.0, weight_decay=0.01,
    vf_coef=0.0, ent_coef=0.001, kl_coef=0.01, kl_clamp=10.0, aggregation="token_mean",
    standardise="none", questions="sampled", term_grad_norms=False)

# ASCT (arXiv 2609.35215, App. A.2, Table 8), for ASCT, VinePPO (asct_jax.search.methods)
# and trajectory PPO (PPO_RETURN below; here, not beside the searched methods, because
# asct_jax.rl does not import asct_jax.search): per iteration (one training step here:
# its batch is the iteration's questions, drawn without replacement) the credit is
# standardised over the iteration's decisions, then 2 epochs of clipped PPO (0.2) on
# minibatches of 8; AdamW (torch's default weight decay 0.01); no critic, no entropy
# bonus, no KL; the loss per decision (action-mean).
ASCT = Protocol(
    epochs=2, minibatches=1, minibatch_size=8, minibatch_unit="episodes", clip_eps=0.2,
    dual_clip=0.0, lr_scale=1.0, warmup_steps=0, max_grad_norm=1.0, weight_decay=0.01,
    vf_coef=0.0, ent_coef=0.0, kl_coef=0.0, kl_clamp=0.0, aggregation="action_mean",
    standardise="batch", questions="walk", term_grad_norms=False)

RETURN_BASELINES = ("critic", "none")   # config.ppo.return_baseline of ppo_return
# Where GRPO / GiGPO (and the methods built on GRPO) read the invalid-action penalty
# (config.<method>.penalty):
# "step", verl-agent's (ray_trainer.py apply_invalid_action_penalty): off the invalid
# step's own copy of the episode return and its own R_t after discounting; "reward": in
# r_t (Rollout.rewards as recorded), what they read before issue 36.
PENALTY_PLACEMENTS = ("step", "reward")


def group_rewards(batch: Rollout, penalty: str):
    """(r_t, p_t) a group-relative method reads ([B, T] each): the environment's reward
    rewards + penalties and the penalty apart ("step"), or the recorded rewards (the
    penalty in them) and none ("reward")."""
    if penalty == "reward":
        return batch.rewards, None
    return batch.rewards + batch.penalties, batch.penalties   # r_t = (r_t - p_t) + p_t


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
class GRPOConfig:
    """GRPO's fields (section grpo); defaults verl-agent's (compute_grpo_outcome_advantage)."""

    stats: str = option(gadv.GROUP_STATS, "samples of the group mean / std: steps (one per "
                        "real turn, theirs: compute_mean_std_cross_steps) or episodes", "steps")
    penalty: str = option(PENALTY_PLACEMENTS, "invalid-action penalty: step (off the step's "
                          "own score, theirs) or reward (in r_t)", "step")


def grpo_config(config) -> GRPOConfig:
    """Section grpo (every field has a default: a config without the section reads them)."""
    return from_section(GRPOConfig, config if "grpo" in config else {"grpo": {}}, "grpo")


@dataclasses.dataclass(frozen=True)
class GiGPOConfig:
    """GiGPO's fields (section gigpo); names and defaults as verl-agent's algorithm.gigpo."""

    gamma: float = option(Range(0.0, 1.0), "discount of the step return R_t in the anchor term")
    omega: float = option(Range(0.0, None), "weight of the anchor-state (step) advantage")
    mode: str = option(gadv.GIGPO_MODES, "mean_norm: x - mean; mean_std_norm: (x - mean) / "
                                         "(std + 1e-6), in both terms")
    episode_stats: str = option(gadv.GIGPO_EPISODE_STATS,
                                "samples of the episode term's mean / std: steps (one per "
                                "real turn, theirs) or episodes (one per episode)")
    penalty: str = option(PENALTY_PLACEMENTS, "invalid-action penalty: step (off the "
                          "step's own R(tau) copy and R_t, theirs) or reward (in r_t)", "step")


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


def _grpo(cfg: GRPOConfig, ctx: CreditContext) -> CreditFn:
    """GRPO over verl-agent's step samples: A_{i,t} = (R(tau_i) - p_{i,t} - mean) / (std +
    eps) on every token of turn t of episode i (`gadv.grpo_step_advantages`)."""

    def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
        r, p = group_rewards(batch, cfg.penalty)
        a = gadv.grpo_step_advantages(r, batch.turn_mask, ctx.group_size, penalties=p,
                                      stats=cfg.stats)
        return from_turn_advantages(batch, a, value_targets_mc(batch))
    return credit


def _gigpo(cfg: GiGPOConfig, ctx: CreditContext) -> CreditFn:
    """GiGPO: the group-relative episode advantage (statistics over the group's turn
    samples by default) plus omega times the anchor-state advantage of each turn
    (`gadv.gigpo_advantages`, verl-agent's compute_gigpo_outcome_advantage)."""
    gamma, omega = float(cfg.gamma), float(cfg.omega)

    def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
        r, p = group_rewards(batch, cfg.penalty)
        a = gadv.gigpo_advantages(r, batch.obs, batch.turn_mask, ctx.group_size,
                                  gamma=gamma, omega=omega, mode=cfg.mode,
                                  episode_stats=cfg.episode_stats, penalties=p)
        return from_turn_advantages(batch, a, value_targets_mc(batch))
    return credit


# The ASCT paper's PPO baselines share its learning protocol: credit standardised within
# the iteration (App. A.2), as PPO implementations whiten their advantages.
PPO_RETURN = Method("ppo_return", _ppo_return, protocol=ASCT,
                    make_config=functools.partial(from_section, ReturnConfig, section="ppo"))
PPO_GAE = Method("ppo_gae", _ppo_gae, protocol=SUBSTRATE,
                 make_config=functools.partial(from_section, GAEConfig, section="ppo"))
GRPO = Method("grpo", _grpo, make_config=grpo_config, protocol=VERL)
GIGPO = Method("gigpo", _gigpo, protocol=VERL,
               make_config=functools.partial(from_section, GiGPOConfig, section="gigpo"))
METHODS = (PPO_RETURN, PPO_GAE, GRPO, GIGPO)
