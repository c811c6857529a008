"""Selection rules: which candidate a simulation takes at one node.

Each rule is one small function `rule(key, node: NodeStats, **hyperparameters)` on the
statistics of ONE node (unbatched; the search vmaps it over trees) and returns the chosen
candidate index (int32 []). Illegal candidates (mask False: illegal or not restorable) are
never chosen; the caller never asks a node with no selectable candidate.

The search takes a *selection function* `(key, node: NodeStats) -> int32 []`: a rule with
its hyperparameters bound, e.g. `functools.partial(agentuct, c_exp=1.4, c_tok=1e-4)`, or any
other function of that signature. `make_selection(name, config, **overrides)` builds one
from a rule name in RULES and a config (what the ASCT credit does); it binds exactly the
hyperparameters (HYPERPARAMS) that the rule's signature names, so no caller special-cases
a rule by its name.

The ASCT paper's rules (`uniform`, `uct`, `agentuct`): an untried selectable child scores
+inf, so a node expands its untried children first (every root action is tried before any
is repeated); among them Uniform and UCT draw uniformly, AgentUCT with probability
proportional to exp(-c_tok T_hat(v, a)). At a fully expanded node:

  Uniform:  the least-visited child, ties at random;
  UCT:      argmax U_bar(v,a) + c_exp sqrt(log(n(v) + 1) / n(v,a))                 (uct_scores)
  AgentUCT: argmax U_bar(v,a) + c_exp sqrt(log(n(v) + 1) / n(v,a)) - c_tok T_hat(v,a)
                                                                         (agentuct_scores)
with ties at random. n(v) = trials through v, n(v,a) through edge a, U_bar the mean
utility backed up through a, T_hat the expected uncached remaining cost (search.cache).

The earlier rules stay under their new names: `uniform_sample` (was "uniform": a ~ Uniform
at every node), `uct_prior` (was "uct": unvisited first by the prior, then UCB1 with eps),
`agentuct_shrink` (was "agentuct": the cost shrinks the bonus), `puct`. Their notation:
n(a) visits of edge a, N_node = sum_a n(a), Qbar(a) = mean backed-up return through a (the
node's critic value V(s) for an unvisited a, "first-play value"), pi_old(a|s) the frozen
actor's prior; their ties go deterministically to the lowest index.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Mapping

import chex
import jax
import jax.numpy as jnp

_BIG = 3.0e38


@chex.dataclass(frozen=True)
class NodeStats:
    """Statistics of one node, all [K] except `value` and `visits` [].

    Attributes:
      child_visits: [K] int32, n(a).
      child_value_sum: [K] float32, sum of returns through a.
      prior_logp: [K] float32, log pi_old(a|s) (-inf allowed where illegal).
      mask: [K] bool, selectable (legal and restorable).
      costs: [K] float32, auxiliary-token cost of a.
      value: [] float32, critic V(s): the first-play value of unvisited actions.
      t_hat: [K] float32, T_hat(v, a): expected uncached remaining cost of taking a
        (search.cache); None: `costs`.
      visits: [] int32, n(v): trials through the node; None: sum_a n(a).
    """

    child_visits: chex.Array
    child_value_sum: chex.Array
    prior_logp: chex.Array
    mask: chex.Array
    costs: chex.Array
    value: chex.Array
    t_hat: chex.Array = None
    visits: chex.Array = None


SelectionFn = Callable[[chex.PRNGKey, "NodeStats"], chex.Array]


def masked_argmax(x: chex.Array, mask: chex.Array) -> chex.Array:
    """argmax of x over mask; any finite or infinite value of a masked-in entry beats a
    masked-out one, NaN counts as the lowest; ties -> lowest index."""
    x = jnp.nan_to_num(x.astype(jnp.float32), nan=-_BIG, posinf=_BIG, neginf=-_BIG)
    return jnp.argmax(jnp.where(mask, x, -jnp.inf)).astype(jnp.int32)


def _qbar(node: NodeStats) -> chex.Array:
    n = node.child_visits
    return jnp.where(n > 0, node.child_value_sum / jnp.maximum(n, 1), node.value)


def _n_node(node: NodeStats) -> chex.Array:
    return jnp.sum(node.child_visits).astype(jnp.float32)


def _unvisited_first(order: chex.Array, score: chex.Array, node: NodeStats) -> chex.Array:
    """Any unvisited selectable action first (the one with the highest `order`), else the
    argmax of `score`."""
    unvisited = node.mask & (node.child_visits == 0)
    return jnp.where(
        jnp.any(unvisited), masked_argmax(order, unvisited), masked_argmax(score, node.mask)
    ).astype(jnp.int32)


def cost_hat(costs: chex.Array, mask: chex.Array) -> chex.Array:
    """cost_hat(a) = cost(a) / mean_{b selectable} cost(b)  (0 if every cost is 0)."""
    m = jnp.sum(jnp.where(mask, costs, 0.0)) / jnp.maximum(jnp.sum(mask), 1)
    return jnp.where(m > 0, costs / jnp.where(m > 0, m, 1.0), 0.0)


def uniform_sample(key: chex.PRNGKey, node: NodeStats) -> chex.Array:
    """Uniform sampling (the earlier "uniform"): a ~ Uniform({a : mask(a)}) at every visit,
    ignoring the statistics. Monte-Carlo baseline with no prior."""
    u = jax.random.uniform(key, node.mask.shape)
    return masked_argmax(u, node.mask)


def uct_prior(key, node: NodeStats, c=1.0, eps=1e-6, unvisited_first=True) -> chex.Array:
    """UCT informed by the actor (the earlier "uct").

    score(a) = Qbar(a) + c * sqrt(ln(N_node + 1) / (n(a) + eps));
    with unvisited_first, unvisited actions are taken first, in decreasing pi_old(a|s).
    """
    del key
    n = node.child_visits.astype(jnp.float32)
    score = _qbar(node) + c * jnp.sqrt(jnp.log(_n_node(node) + 1.0) / (n + eps))  # UCB1
    if not unvisited_first:
        return masked_argmax(score, node.mask)
    return _unvisited_first(node.prior_logp, score, node)


def puct(key, node: NodeStats, c=1.0) -> chex.Array:
    """PUCT (prior in the bonus, AlphaZero form).

    score(a) = Qbar(a) + c * pi_old(a|s) * sqrt(N_node + 1) / (1 + n(a)).
    (+1 under the root so that the prior orders the very first selection.)
    """
    del key
    n = node.child_visits.astype(jnp.float32)
    prior = jnp.exp(jnp.where(node.mask, node.prior_logp, -jnp.inf))
    score = _qbar(node) + c * prior * jnp.sqrt(_n_node(node) + 1.0) / (1.0 + n)  # PUCT
    return masked_argmax(score, node.mask)


def agentuct_shrink(
    key, node: NodeStats, c=1.0, beta=1.0, eps=1e-6, unvisited_first=True
) -> chex.Array:
    """Cost-shrunk UCT (the earlier "agentuct"): the token cost shrinks the exploration bonus.

    score(a) = Qbar(a) + c * sqrt(ln(N_node + 1) / (n(a) + eps)) / (1 + beta * cost_hat(a)),
    cost_hat(a) = cost(a) / mean cost of the selectable actions.
    With unvisited_first, unvisited actions are taken first, in decreasing
    pi_old(a|s) / (1 + beta * cost_hat(a)) (the prior shrunk by the same cost factor).
    """
    del key
    n = node.child_visits.astype(jnp.float32)
    shrink = 1.0 + beta * cost_hat(node.costs, node.mask)
    bonus = c * jnp.sqrt(jnp.log(_n_node(node) + 1.0) / (n + eps)) / shrink  # AgentUCT bonus
    score = _qbar(node) + bonus
    if not unvisited_first:
        return masked_argmax(score, node.mask)
    return _unvisited_first(node.prior_logp - jnp.log(shrink), score, node)


# ------------------------------------------------------------- the ASCT paper's rules
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


# The selection rules by name: the one place their names are declared (configs and
# `make_selection` validate against it).
def prior_sample(key: chex.PRNGKey, node: NodeStats) -> chex.Array:
    """a ~ pi_old(. | s) over the selectable actions, with replacement, ignoring the
    statistics: VinePPO's first continuation step (its trials are the frozen actor's)."""
    logits = jnp.where(node.mask, node.prior_logp, -jnp.inf)
    g = jax.random.gumbel(key, logits.shape)
    return masked_argmax(logits + g, node.mask)


RULES: Dict[str, Callable[..., chex.Array]] = {
    "uniform": uniform,
    "uct": uct,
    "agentuct": agentuct,
    "uniform_sample": uniform_sample,
    "uct_prior": uct_prior,
    "agentuct_shrink": agentuct_shrink,
    "puct": puct,
    "prior_sample": prior_sample,
}

# Every hyperparameter a rule may take; each rule binds the ones its signature names.
HYPERPARAMS = ("c", "beta", "eps", "unvisited_first", "c_exp", "c_tok")


def _config_get(config: Any, name: str) -> Any:
    """config[name] / config.name, or None if absent."""
    if config is None:
        return None
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def make_selection(rule: str, config: Any = None, **overrides: Any) -> SelectionFn:
    """The selection function `(key, node: NodeStats) -> int32 []` of rule `rule`.

    Args:
      rule: a name in RULES.
      config: None, or a dict / ConfigDict / dataclass holding any of HYPERPARAMS (other
        fields are ignored: it may be the whole `asct.search` ConfigDict).
      **overrides: hyperparameters in HYPERPARAMS that replace the config's (None: keep
        the config's); may be traced, e.g. a `beta` schedule.

    Returns:
      functools.partial(RULES[rule], **h), h the hyperparameters the rule's signature
      names (a missing one keeps the rule's default). Python-number values are checked:
      c, beta, c_exp, c_tok >= 0, eps > 0.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {tuple(RULES)}, got {rule!r}")
    unknown = sorted(set(overrides) - set(HYPERPARAMS))
    if unknown:
        raise ValueError(f"unknown selection hyperparameters {unknown}; allowed: {list(HYPERPARAMS)}")
    given = {}
    for name in HYPERPARAMS:
        value = overrides.get(name)
        given[name] = _config_get(config, name) if value is None else value
    nonneg = (lambda v: v >= 0, ">= 0")
    for name, ok, what in (("c", *nonneg), ("beta", *nonneg), ("c_exp", *nonneg),
                           ("c_tok", *nonneg), ("eps", lambda v: v > 0, "> 0")):
        value = given[name]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not ok(value):
            raise ValueError(f"{name} must be {what}, got {value!r}")
    fn = RULES[rule]
    accepted = inspect.signature(fn).parameters
    bound = {k: v for k, v in given.items() if v is not None and k in accepted}
    return functools.partial(fn, **bound)


def linear_schedule(step, start: float, end: float, num_steps: int) -> chex.Array:
    """beta(step) = start + (end - start) * min(step / num_steps, 1): e.g. a cost weight
    that is small early and larger later. Pass the result as `search(..., beta=...)`
    (a traced value: changing it does not recompile the search)."""
    frac = jnp.clip(jnp.asarray(step, jnp.float32) / max(num_steps, 1), 0.0, 1.0)
    return start + (end - start) * frac
