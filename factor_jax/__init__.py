"""FACTOR: how much credit per action (TAC), then where among its tokens (HTA + APM).

Pure, jit- and vmap-able kernels on [B, T] (per action) and [B, T, A] (per token) arrays,
plus SERL's coefficients (the paper's main baseline). See METHODS.md section 2.
"""
from factor_jax.apm import (NORMALISATIONS, TRANSFORMS, apm_weights, clip_renormalise,
                            log_transform, uniform_weights)
from factor_jax.calibration import calibration_mask, calibration_targets, calibration_turns
from factor_jax.coefficients import factor_coefficients, token_coefficients
from factor_jax.diagnostics import (calibration_metrics, conservation_error,
                                    credit_conservation_error, extreme_tokens)
from factor_jax.hta import hindsight_delta, hta_scores, sign_aware_scores
from factor_jax.losses import DISTILL_ESTIMATORS, action_mean_loss, distillation_loss
from factor_jax.serl import serl_coefficients, serl_lambda, serl_token_weights
from factor_jax.tac import boundary_potentials, tac_credit

__all__ = [
    "NORMALISATIONS", "TRANSFORMS", "DISTILL_ESTIMATORS",
    "tac_credit", "boundary_potentials",
    "hta_scores", "hindsight_delta", "sign_aware_scores",
    "apm_weights", "clip_renormalise", "log_transform", "uniform_weights",
    "token_coefficients", "factor_coefficients",
    "action_mean_loss", "distillation_loss",
    "serl_coefficients", "serl_lambda", "serl_token_weights",
    "calibration_turns", "calibration_mask", "calibration_targets",
    "conservation_error", "credit_conservation_error", "calibration_metrics",
    "extreme_tokens",
]
