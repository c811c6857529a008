"""TAC: TD action credit with boundary potentials (docs/methods.md, FACTOR > TAC).

Shapes: B episodes, T turns. Turn t of episode i is real when ``turn_mask[i, t]``; the
mask is a prefix mask (the turns that happened), so episode i has
T_i = sum_t turn_mask[i, t] real turns, t = 0 .. T_i - 1, and x_{T_i} is its terminal
state. Undiscounted (gamma = 1), as in the paper.
"""
from __future__ import annotations

import chex
import jax.numpy as jnp

from factor_jax._checks import check_choice

# factor.step_rewards: what TAC's r_t holds before the last turn.
#   "keep": the environment's rewards (the authors' FACTORTrainer.compute_action_credits);
#   "zero": 0 (this project's earlier FACTOR, which the stored FACTOR tables ran).
STEP_REWARDS = ("keep", "zero")


def tac_rewards(env_rewards: chex.Array, terminal: chex.Array, turn_mask: chex.Array,
                step_rewards: str = "keep") -> chex.Array:
    """TAC's per-turn rewards r_t, as the authors' trainer forms them
    (factor/training/trainer.py, compute_action_credits: `rewards = action_rewards;
    rewards[-1] = terminal`):

      r_t       = r^env_t      for t < T_i - 1   ("keep"; "zero": 0)
      r_{T_i-1} = terminal_i                     (replaces the last turn's own r^env)

    terminal is reward_construction's terminal reward (reward coordinate). With tac_credit
    the credits then sum to
      sum_t A*_t = terminal_i - V~(x_0) + sum_{t < T_i - 1} r^env_t
                 = A_seq + sum_{t < T_i - 1} r^env_t    ("keep"; A_seq under "zero").

    Args:
      env_rewards: [B, T] float, the environment's reward of every turn.
      terminal: [B] float, the terminal reward.
      turn_mask: [B, T] bool, prefix mask of real turns.
      step_rewards: one of STEP_REWARDS (static).
    Returns:
      [B, T] float32 r_t, 0 on padded turns.
    """
    check_choice("step_rewards", step_rewards, STEP_REWARDS)
    chex.assert_rank([env_rewards, terminal, turn_mask], [2, 1, 2])
    chex.assert_type([env_rewards, terminal, turn_mask], [float, float, bool])
    chex.assert_equal_shape([env_rewards, turn_mask])
    chex.assert_equal_shape_prefix([env_rewards, terminal], 1)
    n = jnp.sum(turn_mask, axis=1, dtype=jnp.int32)                           # T_i
    last = jnp.arange(turn_mask.shape[1])[None, :] == (n - 1)[:, None]
    before = env_rewards if step_rewards == "keep" else jnp.zeros_like(env_rewards)
    r = jnp.where(last, terminal[:, None], before)        # rewards[-1] = terminal
    return jnp.where(turn_mask, r, 0.0).astype(jnp.float32)


def boundary_potentials(values: chex.Array, baseline: chex.Array,
                        turn_mask: chex.Array) -> tuple:
    """The potentials V~(x_t) and V~(x_{t+1}) that TAC differences, per real turn.

      V~(x_0)   = b                       (the group baseline, GRPO's mean return)
      V~(x_t)   = V_psi(x_t)              for 0 < t < T_i
      V~(x_T_i) = 0                       (terminal state of episode i)

    Args:
      values: [B, T] float, V_psi(x_t) (read only where 0 < t < T_i).
      baseline: [B] float, b.
      turn_mask: [B, T] bool, prefix mask of real turns.
    Returns:
      (v_now, v_next), each [B, T]: V~(x_t) and V~(x_{t+1}); 0 on padded turns.
    """
    chex.assert_rank([values, baseline, turn_mask], [2, 1, 2])
    chex.assert_type([values, baseline, turn_mask], [float, float, bool])
    chex.assert_equal_shape([values, turn_mask])
    chex.assert_equal_shape_prefix([values, baseline], 1)
    t = jnp.arange(values.shape[1])[None, :]
    safe_values = jnp.where(turn_mask, values, 0.0)  # padding never enters
    # V~(x_t): b at t = 0, V_psi elsewhere.
    v_now = jnp.where(t == 0, baseline[:, None].astype(values.dtype), safe_values)
    # V~(x_{t+1}): V_psi(x_{t+1}) while turn t+1 is real, 0 at the terminal x_{T_i}.
    next_mask = jnp.pad(turn_mask[:, 1:], ((0, 0), (0, 1)))
    next_values = jnp.pad(safe_values[:, 1:], ((0, 0), (0, 1)))
    v_next = jnp.where(next_mask, next_values, 0.0)
    zero = jnp.zeros_like(values)
    return jnp.where(turn_mask, v_now, zero), jnp.where(turn_mask, v_next, zero)


def tac_credit(rewards: chex.Array, values: chex.Array, baseline: chex.Array,
               action_mask: chex.Array) -> chex.Array:
    """TD action credit with boundary potentials.

      A*_t = r_t + V~(x_{t+1}) - V~(x_t),   V~(x_0) = b,  V~(x_T_i) = 0,  V~ = V_psi else.

    The sum telescopes: sum_{t < T_i} A*_t = sum_t r_t - b_i exactly, whatever V_psi is
    (bookkeeping, not accuracy: wrong intermediate values still move credit between
    turns). An episode with no real turn gets A* = 0 everywhere.

    Args:
      rewards: [B, T] float, r_t (ignored on padded turns; FACTOR's: tac_rewards).
      values: [B, T] float, V_psi(x_t) (ignored at t = 0 and on padded turns).
      baseline: [B] float, b (group mean return).
      action_mask: [B, T] bool, prefix mask of real turns (turns that happened).
    Returns:
      [B, T] A*_t, 0 on padded turns.
    """
    chex.assert_rank(rewards, 2)
    chex.assert_type(rewards, float)
    chex.assert_equal_shape([rewards, values, action_mask])
    v_now, v_next = boundary_potentials(values, baseline, action_mask)
    r = jnp.where(action_mask, rewards, 0.0)
    credit = r + v_next - v_now  # A*_t = r_t + V~(x_{t+1}) - V~(x_t)
    return jnp.where(action_mask, credit, 0.0)


def warmup_credit(a_seq: chex.Array, turn_mask: chex.Array) -> chex.Array:
    """The credit of the critic's warm-up: the trajectory advantage split evenly.

      A*_t = A_seq / T_i   on the T_i live turns of episode i (0 elsewhere, 0 if T_i = 0)

    so sum_t A*_t = A_seq exactly as TAC's does. The authors use it while the value head
    warms up, for the 1-indexed steps k <= 10 (FACTORTrainer.compute_action_credits:
    `step <= tac_warmup_steps`); TAC's `tac_credit` from k = 11 on.

    Args:
      a_seq: [B] float, A_seq of each episode (factor_jax.rewards.reward_construction).
      turn_mask: [B, T] bool, the live turns.
    Returns:
      [B, T] A*_t.
    """
    chex.assert_rank([a_seq, turn_mask], [1, 2])
    chex.assert_type([a_seq, turn_mask], [float, bool])
    chex.assert_equal_shape_prefix([a_seq, turn_mask], 1)
    num_turns = jnp.sum(turn_mask, axis=-1, dtype=jnp.int32).astype(a_seq.dtype)  # T_i
    has = num_turns > 0
    share = jnp.where(has, a_seq, 0.0) / jnp.where(has, num_turns, 1.0)  # A_seq / T_i
    return jnp.where(turn_mask, share[:, None], 0.0)
