"""FACTOR's step schedules: the HTA mixing weight eta_k, the distillation weight lambda_k,
and how the constants given for the paper's 150-step runs shrink for shorter runs.

k is the 1-indexed training step throughout, as in the authors' code: their trainer
increments its counter before computing advantages (FACTORTrainer.step_idx += 1), so the
first update is k = 1; HTAConfig.eta and FACTORConfig.serl_lambda are documented "for a
1-indexed step". A 0-based step counter (asct_jax's TrainState.step) passes step + 1.
(SERL's own lambda schedule, also 1-indexed here, is factor_jax.serl.serl_lambda.)
"""
from __future__ import annotations

import chex
import jax.numpy as jnp

from factor_jax._checks import check_range

REFERENCE_STEPS = 150  # the paper's run length; the schedule constants are given for it


def eta_schedule(step, eta0: float = 0.7, start: int = 11, end: int = 49,
                 decay: int = 50) -> chex.Array:
    """HTA's mixing weight (authors' HTAConfig.eta):

      eta_k = eta0 * max(1 - k / decay, 0)   for start <= k <= end,   0 otherwise.

    With the defaults the teacher is off during the critic warm-up (k = 1..10), first on at
    k = 11 (eta = 0.7 * 0.78 = 0.546) and off again from k = 50 on.

    Args:
      step: k, the 1-indexed training step (int or traced int scalar).
      eta0: eta_0 in [0, 1].
      start, end: the active window, inclusive (ints).
      decay: steps for eta to reach 0 (> 0).
    Returns:
      [] float32 eta_k in [0, eta0].
    """
    check_range("eta0", eta0, lo=0.0, hi=1.0)
    check_range("decay", decay, lo=0.0, lo_open=True)
    k = jnp.asarray(step, jnp.float32)
    eta = eta0 * jnp.maximum(1.0 - k / decay, 0.0)  # eta0 * max(1 - k / decay, 0)
    return jnp.where((k >= start) & (k <= end), eta, 0.0).astype(jnp.float32)


def kl_schedule(step, decay: int = 50) -> chex.Array:
    """The distillation weight of FACTOR's objective (authors' FACTORConfig.serl_lambda):

      lambda_k = max(1 - k / decay, 0).

    k < 1 is read as k = 1, as the authors' trainer does (it evaluates the schedule at
    max(step_idx, 1)), so lambda_k <= 1 - 1 / decay.

    Args:
      step: k, the 1-indexed training step (int or traced int scalar).
      decay: steps for lambda to reach 0 (> 0).
    Returns:
      [] float32 lambda_k in [0, 1).
    """
    check_range("decay", decay, lo=0.0, lo_open=True)
    k = jnp.maximum(jnp.asarray(step, jnp.float32), 1.0)
    return jnp.maximum(1.0 - k / decay, 0.0).astype(jnp.float32)  # max(1 - k / decay, 0)


def scale_steps(n: int, steps: int, reference: int = REFERENCE_STEPS) -> int:
    """A schedule constant given for `reference`-step runs, scaled to a run of `steps`:

      n' = round(n * steps / reference)  (half up, in exact integer arithmetic),
      at least 1 when n >= 1.

    E.g. for a 75-step run warm-up 10 -> 5, start 11 -> 6, end 49 -> 25, decay 50 -> 25.
    Each constant is scaled on its own: callers that need start = warm-up + 1 (the
    teacher off during the critic warm-up) should derive it from the scaled warm-up.

    Args:
      n: the constant (int >= 0), e.g. warm-up 10, start 11, end 49, decay 50.
      steps: the run's length (int >= 1).
      reference: the run length n is given for (int >= 1; 150 in the paper).
    Returns:
      int n'.
    """
    for name, value, lo in (("n", n, 0), ("steps", steps, 1), ("reference", reference, 1)):
        check_range(name, value, lo=lo, integer=True)
    scaled = (2 * n * steps + reference) // (2 * reference)  # round half up
    return max(scaled, 1) if n >= 1 else 0
