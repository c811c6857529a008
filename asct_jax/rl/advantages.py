"""Returns and advantage estimators over turns: GAE, GRPO, GiGPO, returns to go, VinePPO.

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
`_reverse_discounted_sum` keeps the plain reverse `lax.scan` form as the reference. Groups
(GRPO / GiGPO / FACTOR) are contiguous: episode i belongs to group i // G, so B must be a
multiple of the group size G.
"""
from __future__ import annotations

from typing import Tuple, Union

import chex
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.infra.checks import check_choice, check_range

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


def _reverse_discounted_sum(x: chex.Array, decay: chex.Array) -> chex.Array:
    """y_t = x_t + decay_t * y_{t+1}, y_T = 0, by a reverse lax.scan over time.

    The reference form (any per-turn decay, any mask); the estimators below use the
    equivalent closed form `_discounted_suffix_sum`, which the tests check against this.

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

    Equal to `_reverse_discounted_sum(x, c * m_{t+1})` when x is 0 outside a prefix mask m:
    a turn k with x_k != 0 is real, so every turn before it is real and the mask factors
    m_{t+1} ... m_k along the way are all 1. Batch-major, no transpose, no scan over T.
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

    Computed as (m * r) @ U(gamma) (module docstring; needs the prefix turn_mask);
    `returns_to_go_scan_reference` is the step-by-step recurrence.

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
    The closed form needs the prefix turn_mask (module docstring); `gae_scan_reference` is
    the step-by-step recurrence. Equal to rlax.truncated_generalized_advantage_estimation with
    discount_t = gamma * m_{t+1} and values = [m * V, 0].

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


def grpo_advantages(returns: chex.Array, group_size: int, eps: float = 1e-6,
                    normalise_std: bool = True, ddof: int = 1) -> chex.Array:
    """Group-relative advantage (GRPO, Shao et al. 2024) of each episode:

      A_i = (G_i - mean_{g(i)} G) / (std_{g(i)} G + eps)     (normalise_std)
      A_i =  G_i - mean_{g(i)} G                              (otherwise, Dr. GRPO)

    Groups are contiguous: episode i belongs to group i // group_size. The std is the
    sample std (ddof=1) as in the TRL and verl GRPO implementations; pass ddof=0 for the
    population std. Its denominator is max(G - ddof, 1), so a group of one (or a group
    whose returns are all equal) gets advantage 0, never NaN.

    Args:
      returns: [B] float episode returns G_i, B = num_groups * group_size.
      group_size: G (static int).
    Returns:
      [B] A_i. Broadcast to turns / tokens with `broadcast_to_tokens`.
    """
    chex.assert_rank(returns, 1)
    b = returns.shape[0]
    if b % group_size:
        raise ValueError(f"batch {b} is not a multiple of group_size {group_size}")
    grouped = returns.reshape(b // group_size, group_size)
    centred = grouped - jnp.mean(grouped, axis=1, keepdims=True)
    if normalise_std:
        var = jnp.sum(centred**2, axis=1, keepdims=True) / max(group_size - ddof, 1)
        centred = centred / (jnp.sqrt(var) + eps)
    return centred.reshape(b)


GIGPO_MODES = ("mean_norm", "mean_std_norm")   # gigpo_advantages(mode=), config.gigpo.mode
GROUP_STATS = ("steps", "episodes")            # the sample set of a group's return statistics
GIGPO_EPISODE_STATS = GROUP_STATS              # gigpo_advantages(episode_stats=), config.gigpo


def _normalised(x: chex.Array, y: chex.Array, w: chex.Array, use_std: bool, eps: float,
                lone_mean_zero: bool) -> chex.Array:
    """N(x_p; X(p)) over weighted sample sets, one row of samples per group.

      X(p)    = {y_q with weight w_pq},  |X(p)| = sum_q w_pq
      N(x; X) = x - mean X  [ / (std X + eps) if use_std ],  std the sample std (ddof 1)
      |X(p)| <= 1: mean 0 (lone_mean_zero) or x_p, and std 1 (verl-agent's conventions).

    Taken over d_pq = y_q - x_p, so a set of values equal to x_p gives exactly 0 (never
    rounding noise / eps).

    Args:
      x: [n, P] float, the samples normalised.
      y: [n, Q] float, the set members.
      w: [n, P, Q] or [n, 1, Q] float >= 0, membership weights (0 outside the set).
    Returns:
      [n, P].
    """
    count = jnp.sum(w, axis=2)                                     # |X(p)|
    many = count > 1.0
    d = y[:, None, :] - x[:, :, None]                              # y_q - x_p
    dm = jnp.sum(w * d, axis=2) / jnp.maximum(count, 1.0)          # mean X(p) - x_p
    a = jnp.where(many, -dm, x if lone_mean_zero else 0.0)         # x_p - mean X(p)
    if use_std:
        var = jnp.sum(w * (d - dm[..., None]) ** 2, axis=2
                      ) / jnp.maximum(count - 1.0, 1.0)            # sample variance of X(p)
        a = a / (jnp.where(many, jnp.sqrt(var), 1.0) + eps)
    return a


def _group_turns(x: chex.Array, group_size: int) -> chex.Array:
    """[B, T, ...] -> [B / G, G * T, ...]: the samples of each group in one row."""
    b, t = x.shape[:2]
    if b % group_size:
        raise ValueError(f"batch {b} is not a multiple of group_size {group_size}")
    return x.reshape((b // group_size, group_size * t) + x.shape[2:])


def _checked_penalties(penalties, rewards: chex.Array, turn_mask: chex.Array) -> chex.Array:
    """p_t as float32, 0 where no turn happened (and everywhere when None)."""
    p = jnp.zeros(rewards.shape, jnp.float32) if penalties is None else penalties
    chex.assert_equal_shape([p, rewards])
    return jnp.where(turn_mask, p, 0).astype(jnp.float32)


def _episode_term(rewards: chex.Array, penalties: chex.Array, turn_mask: chex.Array,
                  group_size: int, stats: str, use_std: bool, eps: float) -> chex.Array:
    """N(R(tau_i) - p_{i,t}; E(g(i))) per real turn, [B, T] (masked inputs, float32):
    GRPO's advantage and GiGPO's A^E over verl-agent's step samples (`grpo_step_advantages`)."""
    ep_ret = episode_returns(rewards, turn_mask)                                 # R(tau_i)
    x = _group_turns(ep_ret[:, None] - penalties, group_size)                    # its score
    if stats == "steps":   # E(g): every real turn's score, R(tau_j) - p_{j,t'}
        y, w = x, _group_turns(turn_mask.astype(jnp.float32), group_size)[:, None, :]
    else:                  # E(g): R(tau_j) once per episode with a turn
        y = ep_ret.reshape(-1, group_size)
        w = (jnp.sum(turn_mask, axis=1) > 0).astype(jnp.float32).reshape(-1, 1, group_size)
    return _normalised(x, y, w, use_std, eps, lone_mean_zero=True).reshape(rewards.shape)


def grpo_step_advantages(rewards: chex.Array, turn_mask: chex.Array, group_size: int, *,
                         penalties=None, stats: str = "steps", normalise_std: bool = True,
                         eps: float = 1e-6) -> chex.Array:
    """GRPO (Shao et al. 2024) over verl-agent's step samples (verl/trainer/ppo/
    core_algos.py compute_grpo_outcome_advantage, compute_mean_std_cross_steps=True, with
    ray_trainer.py apply_invalid_action_penalty). Every real turn (i, t) is one sample
    carrying its copy of the episode return, less its own invalid-action penalty:

      s_{i,t}  = R(tau_i) - p_{i,t}              R(tau) = sum_t m_t r_t   (r_t unpenalised)
      A_{i,t}  = (s_{i,t} - mean X(g)) / (std X(g) + eps)      (normalise_std)
               =  s_{i,t} - mean X(g)                          (otherwise, Dr. GRPO)
      X(g)     = {s_{j,t'} : j in g(i), m_{t'}^j}          stats="steps" (theirs): an episode
                                                           weighs by its number of turns
               = {R(tau_j) : j in g(i), L_j > 0}           stats="episodes": one per episode

    std is the sample std (ddof = 1, torch.std). A set of one sample has mean 0 and std 1
    (theirs: A = s). Without penalties and with equal episode lengths both sets give
    the per-episode GRPO of `grpo_advantages` on every turn. Groups are contiguous.

    Args:
      rewards: [B, T] float r_t, without the penalty.
      turn_mask: [B, T] bool prefix mask.
      group_size: G (static int), B = num_groups * G.
      penalties: None (0), or [B, T] float p_t, the invalid-action penalty of turn t.
      stats: "steps" | "episodes" (static), the sample set X(g).
      normalise_std: divide by std + eps.
      eps: added to the std.
    Returns:
      [B, T] float32 A, 0 where turn_mask is False.
    """
    check_choice("stats", stats, GROUP_STATS)
    _check_turns(rewards, turn_mask)
    p = _checked_penalties(penalties, rewards, turn_mask)
    r = jnp.where(turn_mask, rewards, 0).astype(jnp.float32)
    a = _episode_term(r, p, turn_mask, group_size, stats, normalise_std, eps)
    return a * turn_mask.astype(jnp.float32)


def gigpo_advantages(rewards: chex.Array, obs: chex.Array, turn_mask: chex.Array,
                     group_size: int, *, gamma: Scalar = 0.95, omega: Scalar = 1.0,
                     mode: str = "mean_norm", episode_stats: str = "steps",
                     penalties=None, eps: float = 1e-6) -> chex.Array:
    """GiGPO (Feng et al. 2025), as verl-agent's recipe/gigpo/core_gigpo.py computes it.

    The batch is read as verl-agent's one sample per real turn (i, t), carrying its
    episode's return; the invalid-action penalty p_{i,t} is taken off that sample's own
    copy of R(tau) and off its own R_t after discounting (ray_trainer.py
    apply_invalid_action_penalty on token_level_scores and step_rewards):

      A(a_t^i)   = A^E(i, t) + omega * A^S(i, t)
      A^E(i, t)  = N(R(tau_i) - p_{i,t}; E(g(i)))    R(tau) = sum_t m_t r_t   (undiscounted)
      A^S(i, t)  = N(R_t^i - p_{i,t};   S(i, t))     R_t = r_t + gamma m_{t+1} R_{t+1}
      S(i, t)    = {(j, t') : j in g(i), m_t'^j, obs_t'^j == obs_t^i (all O tokens)}
      N(x; X)    = x - mean X                         (mode "mean_norm")
                 = (x - mean X) / (std X + eps)       (mode "mean_std_norm")

    r_t is the environment's reward (no penalty in it). std is the sample std (ddof = 1,
    torch.std's default). The sample sets (each sample carries its own penalty):
      E(g)  episode_stats="steps" (theirs): R(tau_j) - p_{j,t'} once per real turn of j,
            j in g, so an episode of L_j turns weighs L_j in the mean and std;
            episode_stats="episodes": R(tau_j) once per episode j in g with >= 1 real turn.
            A set of one sample has mean 0 and std 1 (A^E = its value, or / (1 + eps)).
      S(i, t)  holds (i, t) itself and every real turn of the same episode group with an
            identical observation, at any turn (a state revisited within one episode
            counts), each with R_t - p. A singleton has mean its own value and std 1, so
            A^S = 0; a set whose values are all equal also gets 0 (0 / eps).
    Both terms share mode and eps. Without penalties A^E is the same on every turn of an
    episode; A^E is `grpo_step_advantages` (stats = episode_stats).

    Observations are compared per group with one [G*T, G*T] equality matrix; both terms'
    statistics are masked sums over [num_groups, G*T, G*T or G] (`_normalised`).
    Rewards and penalties of turns that did not happen are never read.

    Args:
      rewards: [B, T] float r_t, without the penalty.
      obs: [B, T, O] int tokens x_t, the anchor state of turn t.
      turn_mask: [B, T] bool prefix mask.
      group_size: G (static int), B = num_groups * G, contiguous groups.
      gamma: discount of the step return R_t (their examples: 0.95).
      omega: weight of the step term (their step_advantage_w, 1).
      mode: "mean_norm" | "mean_std_norm" (static).
      episode_stats: "steps" | "episodes" (static): the sample set E(g) of A^E.
      penalties: None (0), or [B, T] float p_t, the invalid-action penalty of turn t.
      eps: added to both stds (> 0).
    Returns:
      [B, T] float32 A, 0 where turn_mask is False.
    """
    check_choice("mode", mode, GIGPO_MODES)
    check_choice("episode_stats", episode_stats, GROUP_STATS)
    check_range("eps", eps, lo=0.0, lo_open=True)
    _check_turns(rewards, turn_mask)
    chex.assert_rank(obs, 3)
    chex.assert_type(obs, int)
    chex.assert_equal_shape_prefix([rewards, obs], 2)
    b, t = rewards.shape
    use_std = mode == "mean_std_norm"
    p = _checked_penalties(penalties, rewards, turn_mask)
    rewards = jnp.where(turn_mask, rewards, 0).astype(jnp.float32)
    mf = turn_mask.astype(jnp.float32)

    # A^E: N(R(tau_i) - p_{i,t}; E(g)), per turn.
    a_e = _episode_term(rewards, p, turn_mask, group_size, episode_stats, use_std, eps)

    # A^S: anchor groups S(i, t) by exact observation equality within the episode group.
    ret = _group_turns(returns_to_go(rewards, turn_mask, gamma) - p, group_size)  # R_t - p
    m = _group_turns(turn_mask, group_size)
    x = _group_turns(obs, group_size)
    same = jnp.all(x[:, :, None, :] == x[:, None, :, :], axis=-1)             # [n, GT, GT]
    w = (same & m[:, :, None] & m[:, None, :]).astype(jnp.float32)
    a_s = _normalised(ret, ret, w, use_std, eps, lone_mean_zero=False)

    # A(a_t^i) = A^E(i, t) + omega * A^S(i, t), 0 at turns that did not happen
    return (a_e + omega * a_s.reshape(b, t)) * mf


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
