"""FACTOR: how much credit per action (TAC), then where among its tokens (HTA + APM).

Pure, jit- and vmap-able kernels on [B, T] (per action) and [B, T, A] (per token) arrays,
one function per equation, each the one the method trains with, as the authors' code
computes it (Super-MariOvO/FACTOR): reward construction, schedules, TAC and its warm-up
credit, checkpoint turns, HTA scores, APM weights, the token coefficients, the two-branch
policy loss and the forward KL; plus SERL's coefficients (the paper's main baseline) and
the Figure 5 diagnostics. See docs/methods.md, FACTOR (and Baselines > SERL). The
ablations are not switches here: factor_jax.methods composes these functions (action
credit -> token weights -> coefficients) differently.
"""
from factor_jax.apm import apm_weights, softmax_weights, uniform_weights
from factor_jax.checkpoints import checkpoint_turns
from factor_jax.coefficients import token_coefficients
from factor_jax.diagnostics import (CalibrationMetrics, Conservation, calibration_metrics,
                                    choice_tokens, conservation, conservation_error,
                                    extreme_tokens, mc_credit, mc_noise_var, mc_references,
                                    mc_state_outcomes, mc_state_values, StateOutcomes,
                                    perturbable_actions, perturbation_returns,
                                    perturbed_actions)
from factor_jax.hta import hindsight_delta, hta_scores
from factor_jax.losses import factor_policy_loss, forward_kl, kl_token_mean
from factor_jax.rewards import OUTCOME_RULES, REWARD_RULES, outcome_rule, reward_construction
from factor_jax.schedules import eta_schedule, kl_schedule, scale_steps
from factor_jax.serl import (serl_coefficients, serl_lambda, serl_prompted_rows,
                             serl_token_weights)
from factor_jax.tac import (STEP_REWARDS, boundary_potentials, tac_credit, tac_rewards,
                            warmup_credit)

__all__ = [
    "REWARD_RULES", "OUTCOME_RULES", "outcome_rule",
    "reward_construction", "eta_schedule", "kl_schedule", "scale_steps",
    "STEP_REWARDS", "tac_rewards", "tac_credit", "boundary_potentials", "warmup_credit",
    "checkpoint_turns",
    "hindsight_delta", "hta_scores",
    "apm_weights", "softmax_weights", "uniform_weights",
    "token_coefficients",
    "factor_policy_loss", "forward_kl", "kl_token_mean",
    "serl_coefficients", "serl_lambda", "serl_prompted_rows", "serl_token_weights",
    "conservation_error", "calibration_metrics", "CalibrationMetrics", "extreme_tokens",
    "conservation", "Conservation", "choice_tokens",
    "mc_state_values", "mc_state_outcomes", "StateOutcomes", "mc_noise_var", "mc_references",
    "mc_credit", "perturbable_actions", "perturbed_actions",
    "perturbation_returns",
]
