"""Group-normalised advantages: GRPO per episode and over step samples, GiGPO.

An episode's advantage is its return normalised by the statistics of its group, the G
episodes sampled for one task:
  grpo_advantages       GRPO (Shao et al. 2024) per episode, [B] -> [B]; the sample std
                        (ddof = 1) as in the TRL and verl GRPO implementations; Dr. GRPO
                        without the std;
  grpo_step_advantages  GRPO over verl-agent's step samples (one per real turn, each less
                        its own invalid-action penalty), [B, T]: verl/trainer/ppo/
                        core_algos.py compute_grpo_outcome_advantage with
                        compute_mean_std_cross_steps=True, the penalty as ray_trainer.py's
                        apply_invalid_action_penalty;
  gigpo_advantages      GiGPO (Feng et al. 2025), the episode term plus the anchor-state
                        term over turns with identical observations, as verl-agent's
                        recipe/gigpo/core_gigpo.py compute_gigpo_outcome_advantage.
GIGPO_MODES and GROUP_STATS (= GIGPO_EPISODE_STATS) are the allowed values of their
configs. docs/methods.md (GRPO, GiGPO) writes the maths out.

Shapes and masks are those of asct_jax.rl.advantages (B episodes, T turns, a prefix
`turn_mask` [B, T]; every [B, T] output is 0 where it is False), whose returns they use.
Groups (GRPO / GiGPO / FACTOR) are contiguous: episode i belongs to group i // G, so B must
be a multiple of the group size G.
"""
from __future__ import annotations

import chex
import jax.numpy as jnp

from asct_jax.infra.checks import check_choice, check_range
from asct_jax.rl.advantages import Scalar, _check_turns, episode_returns, returns_to_go


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
