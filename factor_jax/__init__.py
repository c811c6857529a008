"""FACTOR: how much credit per action (TAC), then where among its tokens (HTA + APM).

Pure, jit- and vmap-able kernels on [B, T] (per action) and [B, T, A] (per token) arrays,
plus SERL's coefficients (the paper's main baseline), and the kernels that follow the
authors' code (Super-MariOvO/FACTOR): reward construction, schedules, hta_weights, the
warm-up credit, checkpoint turns, the two-branch policy loss and the forward KL. See
docs/methods.md, FACTOR (and Baselines > SERL). The ablations are not switches here:
factor_jax.methods composes these functions (action credit -> token weights ->
coefficients) differently.
"""
from factor_jax.apm import (TRANSFORMS, apm_weights, clip_renormalise, log_transform,
                            softmax_weights, uniform_weights, unnormalised_weights)
from factor_jax.checkpoints import checkpoint_turns
from factor_jax.coefficients import (Allocation, factor_coefficients, hindsight_allocation,
                                     token_coefficients)
from factor_jax.diagnostics import (CalibrationMetrics, Conservation, calibration_metrics,
                                    conservation, conservation_error,
                                    credit_conservation_error, extreme_tokens, mc_credit,
                                    mc_state_values, perturbable_actions,
                                    perturbation_returns, perturbed_actions)
from factor_jax.hta import (choice_tokens, hindsight_delta, hta_scores, hta_weights,
                            sign_aware_scores)
from factor_jax.losses import (DISTILL_ESTIMATORS, action_mean_loss, distillation_loss,
                               factor_policy_loss, forward_kl, kl_token_mean)
from factor_jax.rewards import REWARD_RULES, reward_construction
from factor_jax.schedules import eta_schedule, kl_schedule, scale_steps
from factor_jax.serl import serl_coefficients, serl_lambda, serl_token_weights
from factor_jax.tac import boundary_potentials, tac_credit, warmup_credit

__all__ = [
    "TRANSFORMS", "DISTILL_ESTIMATORS", "REWARD_RULES",
    "reward_construction", "eta_schedule", "kl_schedule", "scale_steps",
    "tac_credit", "boundary_potentials", "warmup_credit", "checkpoint_turns",
    "hta_scores", "hindsight_delta", "choice_tokens", "sign_aware_scores", "hta_weights",
    "apm_weights", "softmax_weights", "unnormalised_weights", "uniform_weights",
    "clip_renormalise", "log_transform",
    "token_coefficients", "hindsight_allocation", "Allocation", "factor_coefficients",
    "action_mean_loss", "distillation_loss", "factor_policy_loss", "forward_kl",
    "kl_token_mean",
    "serl_coefficients", "serl_lambda", "serl_token_weights",
    "conservation_error", "credit_conservation_error", "calibration_metrics",
    "CalibrationMetrics", "extreme_tokens", "conservation", "Conservation",
    "mc_state_values", "mc_credit", "perturbable_actions", "perturbed_actions",
    "perturbation_returns",
]
