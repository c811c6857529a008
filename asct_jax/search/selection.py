"""Selection and expansion rules: which candidate a trial takes at ONE node.

A rule is one small function `rule(key, node: NodeStats, **hyperparameters)` on the
statistics of ONE node (unbatched; the search vmaps it over trees). Illegal candidates
(mask False: illegal or not restorable) are never chosen; the search never asks a node
with no selectable candidate. The search takes them with their hyperparameters bound
(functools.partial; search.methods.paper_rules binds the paper's).

The ASCT paper's selection rules (`uniform`, `uct`, `agentuct`): an untried selectable
child scores +inf, so a node expands its untried children first (every root action is
tried before any is repeated); among them Uniform and UCT draw uniformly, AgentUCT with
probability proportional to exp(-c_tok T_hat(v, a)). At a fully expanded node:

  Uniform:  the least-visited child, ties at random;
  UCT:      argmax U_bar(v,a) + c_exp sqrt(log(n(v) + 1) / n(v,a))                 (uct_scores)
  AgentUCT: argmax U_bar(v,a) + c_exp sqrt(log(n(v) + 1) / n(v,a)) - c_tok T_hat(v,a)
                                                                         (agentuct_scores)
with ties at random. n(v) = trials through v, n(v,a) through edge a, U_bar the mean
utility backed up through a, T_hat the expected uncached remaining cost (search.cache).
`prior_sample` (a ~ pi_old, VinePPO's first continuation step) ignores the statistics.

Expansion rules (`(key, node) -> (any untried, the one drawn)`): at a node with untried
children the paper draws one uniformly (`uniform_expansion`: Uniform, UCT) or with
P(a) ~ exp(-c_tok T_hat(v, a)) (`cost_weighted_expansion`: AgentUCT).
"""
from __future__ import annotations

from typing import Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.search.types import NodeStats

_BIG = 3.0e38


def masked_argmax(x: chex.Array, mask: chex.Array) -> chex.Array:
    """argmax of x over mask; any finite or infinite value of a masked-in entry beats a
    masked-out one, NaN counts as the lowest; ties -> lowest index."""
    x = jnp.nan_to_num(x.astype(jnp.float32), nan=-_BIG, posinf=_BIG, neginf=-_BIG)
    return jnp.argmax(jnp.where(mask, x, -jnp.inf)).astype(jnp.int32)


def uct_scores(u_bar: chex.Array, n_node: chex.Array, n_child: chex.Array,
               c_exp=1.4) -> chex.Array:
    """UCT scores [..., K]: U_bar(v,a) + c_exp sqrt(log(n(v) + 1) / n(v,a)), +inf where
    n(v,a) = 0 (untried first).

    Args: u_bar [..., K] f32 mean utility through a; n_node [...] visits n(v);
      n_child [..., K] visits n(v,a); c_exp exploration constant.
    """
    n = jnp.asarray(n_child).astype(jnp.float32)
    n_v = jnp.asarray(n_node).astype(jnp.float32)[..., None]
    bonus = c_exp * jnp.sqrt(jnp.log(n_v + 1.0) / jnp.maximum(n, 1.0))  # c sqrt(log(n(v)+1)/n(v,a))
    return jnp.where(n > 0, jnp.asarray(u_bar, jnp.float32) + bonus, jnp.inf)


def agentuct_scores(u_bar: chex.Array, n_node: chex.Array, n_child: chex.Array,
                    t_hat: chex.Array, c_exp=1.4, c_tok=1e-4) -> chex.Array:
    """AgentUCT scores [..., K]:
    S(v,a) = U_bar(v,a) + c_exp sqrt(log(n(v) + 1) / n(v,a)) - c_tok T_hat(v,a),
    +inf where n(v,a) = 0 (untried first).

    Args: as uct_scores, plus t_hat [..., K] f32, the expected uncached remaining cost.
    """
    s = uct_scores(u_bar, n_node, n_child, c_exp) - c_tok * jnp.asarray(t_hat, jnp.float32)
    return jnp.where(jnp.asarray(n_child) > 0, s, jnp.inf)  # S = UCT - c_tok T_hat


def random_argmax(key: chex.PRNGKey, score: chex.Array, mask: chex.Array,
                  tie_logits: chex.Array = None) -> chex.Array:
    """An argmax of score [K] over mask [K] (+inf beats any finite score, NaN is the
    lowest), ties drawn with probability proportional to exp(tie_logits) (uniform if None)."""
    s = jnp.nan_to_num(score.astype(jnp.float32), nan=-_BIG, posinf=_BIG, neginf=-_BIG)
    s = jnp.where(mask, s, -jnp.inf)
    best = mask & (s >= jnp.max(s))
    logits = jnp.zeros(score.shape, jnp.float32) if tie_logits is None else tie_logits
    return jax.random.categorical(key, jnp.where(best, logits, -jnp.inf)).astype(jnp.int32)


def _u_bar(node: NodeStats) -> chex.Array:
    n = node.child_visits
    return jnp.where(n > 0, node.child_value_sum / jnp.maximum(n, 1), 0.0)


def _node_visits(node: NodeStats) -> chex.Array:
    return jnp.sum(node.child_visits) if node.visits is None else node.visits


def _t_hat(node: NodeStats) -> chex.Array:
    return node.costs if node.t_hat is None else node.t_hat


def uniform(key: chex.PRNGKey, node: NodeStats) -> chex.Array:
    """Uniform (paper): the least-visited selectable child, ties at random (so untried
    children first, uniformly)."""
    return random_argmax(key, -node.child_visits.astype(jnp.float32), node.mask)  # argmin n(v,a)


def uct(key: chex.PRNGKey, node: NodeStats, c_exp=1.4) -> chex.Array:
    """UCT (paper): untried children first, uniformly at random; then the argmax of
    uct_scores (ties at random)."""
    score = uct_scores(_u_bar(node), _node_visits(node), node.child_visits, c_exp)
    return random_argmax(key, score, node.mask)


def agentuct(key: chex.PRNGKey, node: NodeStats, c_exp=1.4, c_tok=1e-4) -> chex.Array:
    """AgentUCT (paper): untried children first, drawn with probability proportional to
    exp(-c_tok T_hat(v,a)); then the argmax of agentuct_scores (ties likewise)."""
    t_hat = _t_hat(node)
    score = agentuct_scores(_u_bar(node), _node_visits(node), node.child_visits, t_hat,
                            c_exp, c_tok)
    return random_argmax(key, score, node.mask, tie_logits=-c_tok * t_hat)  # P ~ exp(-c_tok T_hat)


def prior_sample(key: chex.PRNGKey, node: NodeStats) -> chex.Array:
    """a ~ pi_old(. | s) over the selectable actions, with replacement, ignoring the
    statistics: VinePPO's first continuation step (its trials are the frozen actor's)."""
    logits = jnp.where(node.mask, node.prior_logp, -jnp.inf)
    g = jax.random.gumbel(key, logits.shape)
    return masked_argmax(logits + g, node.mask)


# ----------------------------------------------------------------- expansion rules
def _untried(node: NodeStats) -> chex.Array:
    """[K] bool: the selectable children no trial has taken (n(v, a) = 0)."""
    return node.mask & (node.child_visits == 0)


def uniform_expansion(key: chex.PRNGKey, node: NodeStats) -> Tuple[chex.Array, chex.Array]:
    """(any untried selectable child [] bool, one drawn uniformly [] i32)."""
    untried = _untried(node)
    zeros = jnp.zeros(untried.shape, jnp.float32)
    return jnp.any(untried), random_argmax(key, zeros, untried, zeros)


def cost_weighted_expansion(key: chex.PRNGKey, node: NodeStats,
                            c_tok=1e-4) -> Tuple[chex.Array, chex.Array]:
    """(any untried selectable child [] bool, one drawn with P(a) ~ exp(-c_tok T_hat(v, a)))."""
    untried = _untried(node)
    logits = -c_tok * _t_hat(node)                                         # log P ~ -c_tok T_hat
    return jnp.any(untried), random_argmax(key, jnp.zeros(untried.shape), untried, logits)
