"""The clipped-PPO update's typed config (section `ppo` of the ConfigDict).

The credit methods' own fields (ppo.gamma, ppo.gae_lambda, ppo.return_baseline) are
theirs (asct_jax.rl.methods); this record holds what the update and the optimiser read.
"""
from __future__ import annotations

import dataclasses

from asct_jax.infra.checks import Range
from asct_jax.infra.typed_config import from_section, option
from asct_jax.rl.losses import AGGREGATIONS

# ppo.normalise_advantages: "method" = what the method's paper does (Method.normalise).
NORMALISE_MODES = ("method", "standardise", "none")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    epochs: int = option(Range(1, None, integer=True), "passes over the batch per step")
    minibatches: int = option(Range(1, None, integer=True), "minibatches of episodes per pass")
    clip_eps: float = option(Range(0.0, 1.0, lo_open=True), "PPO ratio clip epsilon")
    lr: float = option(Range(0.0, 1.0, lo_open=True), "AdamW learning rate")
    warmup_steps: int = option(Range(0, None, integer=True), "linear warm-up, in updates")
    max_grad_norm: float = option(Range(0.0, None, lo_open=True), "global-norm gradient clip")
    weight_decay: float = option(Range(0.0, None), "AdamW weight decay")
    vf_coef: float = option(Range(0.0, None), "weight of the value loss")
    ent_coef: float = option(None, "weight of the entropy bonus")
    kl_coef: float = option(Range(0.0, None), "weight of the KL to the initial policy")
    aggregation: str = option(AGGREGATIONS, "how per-token losses are averaged")
    normalise_advantages: str = option(NORMALISE_MODES, "standardise the credit within the "
                                       "step, or not; 'method': as the method's paper does")


def ppo_config(config) -> PPOConfig:
    """PPOConfig of config.ppo (ConfigError naming ppo.<field> on a bad value)."""
    return from_section(PPOConfig, config, "ppo")
