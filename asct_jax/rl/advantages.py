"""Returns and advantage estimators over turns: GAE, returns to go, VinePPO.

Shapes: B episodes, T turns, A tokens per action. `turn_mask` [B, T] bool marks the turns
that happened; it is a *prefix* mask (episode i has turns 0 .. L_i - 1, L_i <= T, and
episodes end at different turns). Every [B, T] output is 0 where `turn_mask` is False.
Per-turn quantities (rewards, values) are read only where the turn happened.

Conventions shared by every estimator:
  m_t       = turn_mask[:, t]                      (m_T = 0: nothing after the horizon)
  V_{t+1}'  = m_{t+1} * V_{t+1}                    (the value after the last real turn is 0)
  gamma     = 1 by default (docs/methods.md, Conventions: finite, undiscounted episodes).

Reverse recurrences over turns are computed in closed form on batch-major [B, T] arrays
(no transposes, no loop over time or batch): with a prefix mask and a masked input x,
y_t = x_t + c * m_{t+1} * y_{t+1} equals sum_{k >= t} c^(k-t) x_k, i.e. y = x @ U(c) with the
[T, T] upper-triangular Toeplitz matrix U[k, t] = c^(k-t) [k >= t] (`_discounted_suffix_sum`).
T (turns, <= ~40) is small, so the matmul is cheap and beats a sequential scan over T.
The plain reverse `lax.scan` forms, the reference the tests compare against, are in
experiments/bench/scan_references.py. The group-normalised advantages (GRPO, GiGPO) are in
asct_jax.rl.group_advantages.
"""
from __future__ import annotations

from typing import Tuple, Union

import chex
import jax
import jax.numpy as jnp
import numpy as np

Scalar = Union[float, chex.Array]


def _check_turns(rewards: chex.Array, turn_mask: chex.Array, *others: chex.Array) -> None:
    """[B, T] float rewards (and any other per-turn arrays), [B, T] bool mask."""
    chex.assert_rank(rewards, 2)
    chex.assert_type(turn_mask, bool)
    chex.assert_equal_shape([rewards, turn_mask, *others])


def _next_turn(x: chex.Array, turn_mask: chex.Array) -> chex.Array:
    """x'_t = m_{t+1} * x_{t+1}, and x'_{T-1} = 0.   [B, T] -> [B, T].

    The value of the state after turn t, which is 0 once the episode is over.
    """
    return jnp.concatenate([_masked(x[:, 1:], turn_mask[:, 1:]), jnp.zeros_like(x[:, :1])],
                           axis=1)


def _masked(x: chex.Array, mask: chex.Array) -> chex.Array:
    """x where mask, else 0: padding (even inf / nan) never reaches the arithmetic."""
    return jnp.where(mask, x, jnp.zeros((), x.dtype))


# Up to this many turns the suffix sum is an unrolled sum of T broadcast rows (one fused
# elementwise kernel, O(T) work per entry, delta fused in); above it, one matmul with U.
# Measured on XLA:CPU (experiments/bench/credit.py): the unrolled sum wins at T = 4
# (returns-to-go 3x, GAE 1.4x faster than the matmul at B = 4096) and loses from T = 8.
_UNROLL_MAX_T = 4


def _suffix_matrix(c: Scalar, t: int, dtype) -> chex.Array:
    """U[k, j] = c^(k-j) if k >= j else 0, the [T, T] matrix of y = x @ U.

    A NumPy constant (powers in float64) when c is a concrete number, so U is folded
    into the program; built in-graph by repeated products when c is traced.
    """
    k = np.arange(t)[:, None]
    j = np.arange(t)[None, :]
    lag = np.maximum(k - j, 0)
    try:
        c_val = float(c)
    except (TypeError, jax.errors.ConcretizationTypeError):
        c_val = None
    if c_val is not None:
        powers = np.cumprod(np.concatenate([[1.0], np.full(t - 1, c_val)]))  # c^0 .. c^(T-1)
        return jnp.asarray(np.where(k >= j, powers[lag], 0.0), dtype)
    c = jnp.asarray(c, dtype)
    powers = jnp.cumprod(jnp.concatenate([jnp.ones((1,), dtype),
                                          jnp.broadcast_to(c, (t - 1,))]))  # c^0 .. c^(T-1)
    return jnp.where(jnp.asarray(k >= j), powers[lag], jnp.zeros((), dtype))


def _discounted_suffix_sum(x: chex.Array, c: Scalar) -> chex.Array:
    """y_t = sum_{k >= t} c^(k-t) x_k  (= x_t + c * y_{t+1}, y_T = 0).   [B, T] -> [B, T].

    Equal to the reverse scan y_t = x_t + c m_{t+1} y_{t+1} (the reference in
    experiments/bench/scan_references.py) when x is 0 outside a prefix mask m: a turn k with
    x_k != 0 is real, so every turn before it is real and the mask factors m_{t+1} ... m_k
    along the way are all 1. Batch-major, no transpose, no scan over T.
    """
    t = x.shape[1]
    u = _suffix_matrix(c, t, x.dtype)
    if t <= _UNROLL_MAX_T:
        # y[:, j] = sum_k x[:, k] * U[k, j]: T broadcast multiply-adds, fused into one kernel.
        y = x[:, t - 1:t] * u[t - 1]
        for k in range(t - 2, -1, -1):
            y = y + x[:, k:k + 1] * u[k]
        return y
    return jnp.dot(x, u, precision=jax.lax.Precision.HIGHEST)  # y = x @ U


def returns_to_go(rewards: chex.Array, turn_mask: chex.Array,
                  gamma: Scalar = 1.0) -> chex.Array:
    """Discounted return from each turn:  G_t = sum_{k >= t} gamma^{k-t} m_k r_k.

    Computed as (m * r) @ U(gamma) (module docstring; needs the prefix turn_mask); the
    step-by-step recurrence is in experiments/bench/scan_references.py.

    Args:
      rewards: [B, T] float r_t.
      turn_mask: [B, T] bool.
      gamma: discount (1: undiscounted).
    Returns:
      [B, T] G_t, 0 where masked.
    """
    _check_turns(rewards, turn_mask)
    # G_t = m_t r_t + gamma * m_{t+1} G_{t+1} = sum_{k >= t} gamma^(k-t) m_k r_k (prefix mask);
    # G_t = 0 for t >= L already (every term has k >= t >= L, so m_k = 0).
    return _discounted_suffix_sum(_masked(rewards, turn_mask), gamma)


def episode_returns(rewards: chex.Array, turn_mask: chex.Array) -> chex.Array:
    """Undiscounted episode return  G = sum_t m_t r_t.   [B, T] -> [B]."""
    _check_turns(rewards, turn_mask)
    return jnp.sum(_masked(rewards, turn_mask), axis=1)


def td_residuals(rewards: chex.Array, values: chex.Array, turn_mask: chex.Array,
                 gamma: Scalar = 1.0) -> chex.Array:
    """One-step TD errors with a zero terminal value:

      delta_t = m_t * (r_t + gamma * m_{t+1} V_{t+1} - V_t).

    Args:
      rewards, values: [B, T] float (values: V(x_t) at the turns that happened).
      turn_mask: [B, T] bool.
    Returns:
      [B, T] delta_t.
    """
    _check_turns(rewards, turn_mask, values)
    r, v = _masked(rewards, turn_mask), _masked(values, turn_mask)
    return _masked(r + gamma * _next_turn(v, turn_mask) - v, turn_mask)


def gae(rewards: chex.Array, values: chex.Array, turn_mask: chex.Array,
        gamma: Scalar = 1.0, lam: Scalar = 0.95) -> Tuple[chex.Array, chex.Array]:
    """Generalised advantage estimation (Schulman et al. 2016) over turns.

      delta_t = r_t + gamma * V_{t+1}' - V_t,          V_{t+1}' = m_{t+1} V_{t+1}
      A_t     = delta_t + gamma * lam * m_{t+1} * A_{t+1}
              = sum_{k >= t} (gamma lam)^(k-t) m_k delta_k      (prefix mask: A = delta @ U)
      target_t = A_t + V_t                               (the lambda-return)

    The value after the last real turn is 0 (episodes end, they are not truncated).
    The closed form needs the prefix turn_mask (module docstring); the step-by-step
    recurrence is in experiments/bench/scan_references.py. Equal to
    rlax.truncated_generalized_advantage_estimation with discount_t = gamma * m_{t+1} and
    values = [m * V, 0].

    Args:
      rewards: [B, T] float r_t.
      values: [B, T] float V(x_t) (treated as constants: stop_gradient).
      turn_mask: [B, T] bool.
      gamma, lam: discount and GAE lambda.
    Returns:
      (advantages [B, T], value targets [B, T]), both 0 where masked.
    """
    _check_turns(rewards, turn_mask, values)
    values = jax.lax.stop_gradient(values)
    delta = td_residuals(rewards, values, turn_mask, gamma)       # m_t delta_t
    adv = _discounted_suffix_sum(delta, gamma * lam)              # 0 for t >= L already
    return adv, adv + _masked(values, turn_mask)                  # (A_t, m_t (A_t + V_t))


def vineppo_advantages(rewards: chex.Array, v_hat: chex.Array, turn_mask: chex.Array,
                       gamma: Scalar = 1.0) -> chex.Array:
    """VinePPO advantage from Monte-Carlo state values (Kazemnejad et al. 2024):

      A_t = r_t + gamma * V^(s_{t+1}) - V^(s_t),     V^(terminal) = 0.

    With gamma = 1 it telescopes: sum_t A_t = G - V^(s_0).

    Args:
      rewards: [B, T] float r_t.
      v_hat: [B, T] float V^(s_t), the mean return of K rollouts of pi_old from s_t.
      turn_mask: [B, T] bool.
    Returns:
      [B, T] A_t, 0 where masked.
    """
    return td_residuals(rewards, jax.lax.stop_gradient(v_hat), turn_mask, gamma)


def broadcast_to_tokens(adv: chex.Array, token_mask: chex.Array) -> chex.Array:
    """C_{t,j} = A_t * token_mask_{t,j}: the turn's advantage on each of its action tokens.

    Args:
      adv: [B, T] float.
      token_mask: [B, T, A] bool.
    Returns:
      [B, T, A] float, 0 where masked.
    """
    chex.assert_rank([adv, token_mask], [2, 3])
    chex.assert_type(token_mask, bool)
    chex.assert_equal_shape_prefix([adv, token_mask], 2)
    return adv[..., None] * token_mask.astype(adv.dtype)


def standardise_coefficients(coef: chex.Array, turn_mask: chex.Array, token_mask: chex.Array,
                             eps: float = 1e-6) -> chex.Array:
    """Standardises the credit across the step's decisions (the ASCT paper, App. A.2:
    "standardization across collected decisions within each iteration").

    A decision's credit is the mean of its tokens' coefficients, a_t = mean_j C_{t,j}
    (for a turn-level credit the broadcast A_t itself); over the real turns,
      mu = mean_t a_t,  sd = std_t a_t (population),  C'_{t,j} = (C_{t,j} - mu) / sd,
    so the decisions' credits have mean 0 and std 1 and each token keeps its offset
    (scaled). If sd <= eps (every decision's credit equal) the credit is only centred.

    Args:
      coef: [B, T, A] float, 0 where token_mask is False.
      turn_mask: [B, T] bool, the real turns.
      token_mask: [B, T, A] bool, the trained tokens.
    Returns:
      [B, T, A] float, 0 where token_mask is False.
    """
    chex.assert_rank([coef, turn_mask, token_mask], [3, 2, 3])
    chex.assert_equal_shape([coef, token_mask])
    tm = token_mask.astype(coef.dtype)
    n_tok = jnp.sum(tm, axis=-1)
    live = turn_mask & (n_tok > 0)
    a = jnp.sum(coef * tm, axis=-1) / jnp.maximum(n_tok, 1.0)            # a_t
    w = live.astype(coef.dtype)
    n = jnp.maximum(jnp.sum(w), 1.0)
    mu = jnp.sum(a * w) / n                                                # mu
    sd = jnp.sqrt(jnp.sum(jnp.square(a - mu) * w) / n)                     # sd
    sd = jnp.where(sd > eps, sd, 1.0)
    return jnp.where(token_mask & live[..., None], (coef - mu) / sd, 0.0)  # C'
