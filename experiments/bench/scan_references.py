"""The reverse lax.scan forms of asct_jax.rl.advantages' closed-form turn kernels (were
asct_jax.rl.advantages.returns_to_go_scan_reference / gae_scan_reference, the previous
implementations, which only the tests and experiments/bench/credit.py used): the
step-by-step recurrences the closed forms (y = x @ U, `_discounted_suffix_sum`) are tested
and benchmarked against."""
from typing import Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.rl.advantages import Scalar, _check_turns, _next_turn, td_residuals


def _reverse_discounted_sum(x: chex.Array, decay: chex.Array) -> chex.Array:
    """y_t = x_t + decay_t * y_{t+1}, y_T = 0, by a reverse lax.scan over time.

    The reference form (any per-turn decay, any mask); asct_jax.rl.advantages' estimators
    use the equivalent closed form `_discounted_suffix_sum`, which the tests check against
    this.

    Args:
      x, decay: [B, T] float.
    Returns:
      [B, T].
    """
    def step(carry, inputs):
        x_t, decay_t = inputs
        y_t = x_t + decay_t * carry
        return y_t, y_t

    init = jnp.zeros_like(x[:, 0])
    _, ys = jax.lax.scan(step, init, (x.T, decay.T), reverse=True)
    return ys.T


def returns_to_go_scan_reference(rewards: chex.Array, turn_mask: chex.Array,
                                 gamma: Scalar = 1.0) -> chex.Array:
    """`returns_to_go` by the plain reverse lax.scan (the previous implementation).

      G_t = m_t r_t + gamma * m_{t+1} * G_{t+1},  G_T = 0.

    Kept as the reference the tests and experiments/bench/credit.py compare against.
    """
    _check_turns(rewards, turn_mask)
    m = turn_mask.astype(rewards.dtype)
    g = _reverse_discounted_sum(rewards * m, gamma * _next_turn(m, turn_mask))
    return g * m


def gae_scan_reference(rewards: chex.Array, values: chex.Array, turn_mask: chex.Array,
                       gamma: Scalar = 1.0, lam: Scalar = 0.95
                       ) -> Tuple[chex.Array, chex.Array]:
    """`gae` by the plain reverse lax.scan (the previous implementation).

      A_t = delta_t + gamma * lam * m_{t+1} * A_{t+1},  A_T = 0;  target_t = A_t + V_t.

    Kept as the reference the tests and experiments/bench/credit.py compare against.
    """
    _check_turns(rewards, turn_mask, values)
    values = jax.lax.stop_gradient(values)
    m = turn_mask.astype(rewards.dtype)
    delta = td_residuals(rewards, values, turn_mask, gamma)
    adv = _reverse_discounted_sum(delta, gamma * lam * _next_turn(m, turn_mask))
    adv = adv * m
    return adv, (adv + values) * m
