"""TAC's critic: a separate value head on stop-gradient backbone features, its own Adam,
a replay of recent Monte-Carlo targets and a Polyak target head (docs/methods.md,
FACTOR > TAC critic). Pure functions on a `CriticState` pytree, which is FACTOR's method
state (checkpointed, resumed, stacked per seed with the train state).

    V_phi(h) = w2 . GELU(W1 h + b1) + b2,   h = sg(last hidden state at the pre-action boundary)
    loss     = mean over <= `sample` pooled targets of (V_phi(h) - y)^2    (one Adam step)
    phi_bar <- decay * phi_bar + (1 - decay) * phi                        (Polyak target)
(one such step per training step, the authors'; `critic_steps` makes several).
`prefit` fits the head on a filled replay before training (factor.critic_start "prefit",
this project's option) and measures it on a held-out share.

Credit reads the target head phi_bar. Shapes: H features, D = hidden width of the head,
W replay steps, N targets stored per step.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import chex
import jax
import jax.numpy as jnp
import optax


@chex.dataclass(frozen=True)
class CriticState:
    """online, target: {"w1": [H, D], "b1": [D], "w2": [D], "b2": []} heads; opt_state:
    the online head's Adam state; features [W, N, H], targets [W, N], valid [W, N]: the
    replay of the last W steps' targets; cursor: [] int32, the slot the next step writes."""

    online: Dict[str, chex.Array]
    target: Dict[str, chex.Array]
    opt_state: Any
    features: chex.Array
    targets: chex.Array
    valid: chex.Array
    cursor: chex.Array


def critic_optimizer(lr: float) -> optax.GradientTransformation:
    """Adam, no weight decay (the authors' critic optimiser)."""
    return optax.adam(lr)


def init_head(key, hidden: int, width: int) -> Dict[str, chex.Array]:
    """Orthogonal init (gain sqrt 2; output layer gain 0.01), zero biases."""
    k1, k2 = jax.random.split(key)
    w1 = jax.nn.initializers.orthogonal(math.sqrt(2.0))(k1, (hidden, width), jnp.float32)
    w2 = jax.nn.initializers.orthogonal(0.01)(k2, (width, 1), jnp.float32)[:, 0]
    return {"w1": w1, "b1": jnp.zeros((width,), jnp.float32), "w2": w2,
            "b2": jnp.zeros((), jnp.float32)}


def head_value(head: Dict[str, chex.Array], features: chex.Array) -> chex.Array:
    """V(h) = w2 . GELU(W1 h + b1) + b2 (exact GELU): features [..., H] -> [...]."""
    chex.assert_axis_dimension(features, -1, head["w1"].shape[0])
    z = jax.nn.gelu(features @ head["w1"] + head["b1"], approximate=False)
    return z @ head["w2"] + head["b2"]


def init_critic(key, hidden: int, width: int, window: int, per_step: int,
                lr: float) -> CriticState:
    """A fresh critic (target = online) and an empty replay of `window` x `per_step`."""
    head = init_head(key, hidden, width)
    return CriticState(
        online=head, target=jax.tree.map(jnp.copy, head),
        opt_state=critic_optimizer(lr).init(head),
        features=jnp.zeros((window, per_step, hidden), jnp.float32),
        targets=jnp.zeros((window, per_step), jnp.float32),
        valid=jnp.zeros((window, per_step), bool), cursor=jnp.zeros((), jnp.int32))


def _take_valid(key, valid: chex.Array, k: int) -> chex.Array:
    """Indices of k entries of a flat [n] mask, uniformly without replacement among the
    valid ones first (Gumbel top-k with uniform keys); invalid ones fill the rest."""
    u = jax.random.uniform(key, valid.shape)
    return jax.lax.top_k(jnp.where(valid, u, -1.0), k)[1]


def push(state: CriticState, key, features: chex.Array, targets: chex.Array,
         valid: chex.Array) -> CriticState:
    """Writes one step's targets (features [n, H], targets [n], valid [n]) into the
    replay slot `cursor` (the oldest step), keeping at most N of them (a uniform subset
    of the valid ones when there are more)."""
    chex.assert_rank([features, targets, valid], [2, 1, 1])
    n = state.targets.shape[1]
    if features.shape[0] < n:       # pad to the slot size
        pad = n - features.shape[0]
        features = jnp.pad(features, ((0, pad), (0, 0)))
        targets, valid = jnp.pad(targets, (0, pad)), jnp.pad(valid, (0, pad))
    idx = _take_valid(key, valid, n)
    slot = state.cursor % state.targets.shape[0]
    return state.replace(
        features=state.features.at[slot].set(features[idx]),
        targets=state.targets.at[slot].set(targets[idx]),
        valid=state.valid.at[slot].set(valid[idx]), cursor=state.cursor + 1)


def critic_step(state: CriticState, key, lr: float, sample: int,
                polyak: float) -> Tuple[CriticState, Dict[str, chex.Array]]:
    """One MSE step of the online head on <= `sample` targets drawn uniformly from the
    pooled replay, then the Polyak update of the target head. No-op on an empty replay.

    Returns (state, {"critic_loss", "critic_targets": pooled count, "critic_target_mean"}).
    """
    w, n, h = state.features.shape
    flat_valid = state.valid.reshape(-1)
    k = min(sample, w * n)
    idx = _take_valid(key, flat_valid, k)
    x = state.features.reshape(-1, h)[idx]
    y = state.targets.reshape(-1)[idx]
    m = flat_valid[idx].astype(jnp.float32)
    count = jnp.sum(m)

    def loss_fn(head):
        err = head_value(head, x) - y
        return jnp.sum(m * err * err) / jnp.maximum(count, 1.0)   # MSE over the sample

    loss, grads = jax.value_and_grad(loss_fn)(state.online)
    updates, opt_state = critic_optimizer(lr).update(grads, state.opt_state, state.online)
    online = optax.apply_updates(state.online, updates)
    # An empty replay takes no step (Adam's moments would still move on zero gradients).
    online, opt_state = jax.tree.map(lambda new, old: jnp.where(count > 0, new, old),
                                     (online, opt_state), (state.online, state.opt_state))
    target = jax.tree.map(lambda t, o: polyak * t + (1.0 - polyak) * o,   # Polyak
                          state.target, online)
    target = jax.tree.map(lambda new, old: jnp.where(count > 0, new, old), target,
                          state.target)
    metrics = {"critic_loss": loss, "critic_targets": jnp.sum(flat_valid.astype(jnp.float32)),
               "critic_target_mean": jnp.sum(m * y) / jnp.maximum(count, 1.0)}
    return state.replace(online=online, target=target, opt_state=opt_state), metrics


def critic_steps(state: CriticState, key, lr: float, sample: int, polyak: float,
                 steps: int = 1) -> Tuple[CriticState, Dict[str, chex.Array]]:
    """`steps` critic_step calls in a row (each a fresh draw from the replay, one Adam
    step, then Polyak: the authors' TACModule.train_step `steps` times), with the metrics
    of the last. steps = 1 is critic_step itself (the authors' one call per training step)."""
    if steps == 1:
        return critic_step(state, key, lr, sample, polyak)
    state, metrics = jax.lax.scan(lambda s, k: critic_step(s, k, lr, sample, polyak),
                                  state, jax.random.split(key, steps))
    return state, jax.tree.map(lambda m: m[-1], metrics)


def fit_stats(values: chex.Array, targets: chex.Array, mask: chex.Array
              ) -> Dict[str, chex.Array]:
    """How well V(h) fits the targets over the `mask`ed entries ([...] arrays):
      mse = mean (V - y)^2,   var = mean (y - mean y)^2 (the MSE of predicting the mean),
      r   = cov(V, y) / (std V std y)   (Pearson; 0 where either is constant),
    and n, the entries counted. -> {"mse", "var", "r", "n"}, each [] float32."""
    chex.assert_equal_shape([values, targets, mask])
    w = mask.astype(jnp.float32)
    n = jnp.sum(w)
    mean = lambda x: jnp.sum(w * x) / jnp.maximum(n, 1.0)  # noqa: E731
    dv, dy = values - mean(values), targets - mean(targets)
    cov, vv, yy = mean(dv * dy), mean(dv * dv), mean(dy * dy)
    prod = vv * yy
    r = jnp.where(prod > 0, cov / jnp.sqrt(jnp.where(prod > 0, prod, 1.0)), 0.0)
    return {"mse": mean((values - targets) ** 2), "var": yy, "r": r, "n": n}


def prefit(state: CriticState, key, lr: float, sample: int, steps: int,
           holdout: float = 0.25) -> Tuple[CriticState, Dict[str, chex.Array]]:
    """Fits the online head to a filled replay before training: each valid target is
    held out with probability `holdout`, `steps` critic_step calls (Adam on <= `sample`
    drawn targets) run on the rest at Polyak decay 0 (the target head ends as the fitted
    head), and the held-out targets go back into the replay.

    Returns (state, metrics): critic_loss_before / critic_loss_after, the online head's
    MSE over the fitted targets; heldout_mse, heldout_r (Pearson r of V(h) with the
    target) and heldout_var (the targets' variance, the MSE of their mean) over the
    held-out ones after the fit; targets, heldout: their counts."""
    k_hold, k_fit = jax.random.split(key)
    held = state.valid & (jax.random.uniform(k_hold, state.valid.shape) < holdout)
    fit = state.replace(valid=state.valid & ~held)
    before = fit_stats(head_value(fit.online, fit.features), fit.targets, fit.valid)
    fit, _ = critic_steps(fit, k_fit, lr, sample, 0.0, steps)
    values = head_value(fit.online, fit.features)                     # [W, N]
    after, out = fit_stats(values, fit.targets, fit.valid), fit_stats(values, fit.targets, held)
    metrics = {"critic_loss_before": before["mse"], "critic_loss_after": after["mse"],
               "heldout_mse": out["mse"], "heldout_r": out["r"], "heldout_var": out["var"],
               "targets": after["n"], "heldout": out["n"]}
    return fit.replace(valid=state.valid), metrics


def spread_ratio(target_values: chex.Array, online_values: chex.Array,
                 mask: chex.Array) -> chex.Array:
    """How far the Polyak target tracks the online head over states: the standard
    deviation of the target's values over the `mask`ed entries divided by the online
    head's (1: the same spread, 0: a target that does not tell the states apart; TAC's
    credit on interior actions is the target's differences). [...] arrays -> [] float32
    (0 when the online head's values are constant)."""
    chex.assert_equal_shape([target_values, online_values, mask])
    w = mask.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(w), 1.0)

    def std(v):
        mean = jnp.sum(w * v) / n
        return jnp.sqrt(jnp.sum(w * (v - mean) ** 2) / n)
    s_online = std(online_values)
    return jnp.where(s_online > 0, std(target_values) / jnp.where(s_online > 0, s_online,
                                                                   1.0), 0.0)
