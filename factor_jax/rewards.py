"""FACTOR's reward construction: from group outcomes G to (terminal reward, A_seq, V~(x_0)).

One rule per environment (docs/methods.md, FACTOR; the authors' trainer,
TrajectoryBatch.construct_rewards), inside each group of K trajectories of one task:

  "leave_one_out" (ALFWorld):     b_i = sum_{j != i} G_j / (K - 1)   (0 if K = 1)
                                  A_seq = G_i - b_i,  terminal = G_i,  V~(x_0) = b_i
  "standardise"   (WebShop):      A_seq = (G_i - mu) / (sigma + 1e-8)  (population std;
                                  A_seq = 0 for the whole group if sigma < 1e-6)
                                  terminal = A_seq,  V~(x_0) = 0
  "raw"           (ScienceWorld): A_seq = G_i,  terminal = G_i,  V~(x_0) = 0

Shapes: [B] per episode, B = num_groups * K; groups are contiguous (episode i is in group
i // K), as in asct_jax.rl.group_advantages.grpo_advantages.
"""
from __future__ import annotations

from typing import Tuple

import chex
import jax.numpy as jnp

from factor_jax._checks import check_choice

REWARD_RULES = ("leave_one_out", "standardise", "raw")

# (reward rule, outcome G) per environment, as the benchmark it stands for; G is an info
# field of the episode's end, or "return". Any other environment (rag_workflow, the host
# games): DEFAULT_OUTCOME_RULE. factor.reward_rule / factor.outcome override them.
OUTCOME_RULES = {
    "household": ("leave_one_out", "success"),   # as ALFWorld
    "shop": ("standardise", "score"),            # as WebShop
    "science": ("raw", "success"),               # as ScienceWorld
    "ragspace": ("raw", "return"),
}
DEFAULT_OUTCOME_RULE = ("raw", "return")

STD_EPS = 1e-8     # added to sigma in "standardise"
MIN_STD = 1e-6     # a group with sigma below this gets A_seq = 0 ("standardise")


def outcome_rule(env_name: str) -> Tuple[str, str]:
    """(reward rule, outcome) of the environment called `env_name` (OUTCOME_RULES)."""
    return OUTCOME_RULES.get(env_name, DEFAULT_OUTCOME_RULE)


def reward_construction(returns: chex.Array, group_size: int, rule: str
                        ) -> Tuple[chex.Array, chex.Array, chex.Array]:
    """The terminal reward, trajectory advantage A_seq and boundary potential V~(x_0) of
    every episode, by the environment's rule (module docstring).

    A TAC credit built from them telescopes to A_seq: sum_t A*_t = terminal - V~(x_0) for
    "leave_one_out" (G - b) and for the two rules with V~(x_0) = 0 (terminal = A_seq).

    Args:
      returns: [B] float, G_i (the episode outcome in the environment's coordinate).
      group_size: K >= 1 (static int), dividing B.
      rule: one of REWARD_RULES.
    Returns:
      (terminal [B], a_seq [B], baseline [B]), float like `returns`.
    """
    check_choice("rule", rule, REWARD_RULES)
    chex.assert_rank(returns, 1)
    chex.assert_type(returns, float)
    b = returns.shape[0]
    if not (isinstance(group_size, int) and group_size >= 1 and b % group_size == 0):
        raise ValueError(f"group_size must be an int >= 1 dividing the batch {b}, "
                         f"got {group_size!r}")
    k = group_size
    g = returns.reshape(b // k, k)
    zero = jnp.zeros_like(g)
    if rule == "leave_one_out":
        total = jnp.sum(g, axis=1, keepdims=True)
        base = (total - g) / (k - 1) if k > 1 else zero  # b_i = sum_{j != i} G_j / (K - 1)
        a_seq = g - base  # A_seq = G_i - b_i
        out = (g, a_seq, base)
    elif rule == "standardise":
        mu = jnp.mean(g, axis=1, keepdims=True)
        sigma = jnp.sqrt(jnp.mean((g - mu) ** 2, axis=1, keepdims=True))  # population std
        a_seq = (g - mu) / (sigma + STD_EPS)  # A_seq = (G_i - mu) / (sigma + 1e-8)
        a_seq = jnp.where(sigma < MIN_STD, 0.0, a_seq)  # degenerate group: A_seq = 0
        out = (a_seq, a_seq, zero)
    else:  # "raw"
        out = (g, g, zero)
    return tuple(x.reshape(b) for x in out)
