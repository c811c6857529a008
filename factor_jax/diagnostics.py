"""FACTOR diagnostics, the paper's Figure 5 (docs/methods.md, FACTOR > Diagnostics):
conservation, calibration of TAC against Monte-Carlo credit, token perturbation.

Pure, jit- and vmap-able kernels; factor_jax.figure5 runs them (with the choice of states
and actions on the host), experiments/tables/factor_fig5.py trains and plots. Shapes:
[B, T] per action, [B, T, A] per token, N selected states / actions, K candidates,
V action variants, R rollouts.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Sequence, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.play import play_from
from asct_jax.search.rollout_value import mc_return, rollout_return
from factor_jax.apm import softmax_weights
from factor_jax.continuations import episode_outcome, outcome_targets
from factor_jax.tac import tac_credit


def conservation_error(weights: chex.Array, token_mask: chex.Array) -> chex.Array:
    """|(1/L_t) sum_j omega_{t,j} - 1| per action; 0 for an action with no real token.

    Args:
      weights: [B, T, A] float, omega. token_mask: [B, T, A] bool.
    Returns:
      [B, T] float (should sit at 0 for APM; 1 - 1/L_t for softmax weights).
    """
    chex.assert_rank([weights, token_mask], 3)
    chex.assert_type([weights, token_mask], [float, bool])
    chex.assert_equal_shape([weights, token_mask])
    length = jnp.sum(token_mask, axis=-1).astype(weights.dtype)
    total = jnp.sum(jnp.where(token_mask, weights, 0.0), axis=-1)
    err = jnp.abs(total / jnp.maximum(length, 1.0) - 1.0)
    return jnp.where(length > 0, err, 0.0)


@chex.dataclass(frozen=True)
class CalibrationMetrics:
    """TAC credit vs a reference credit (calibration_metrics); each field []. A mapping
    (`.items()`, `m["corr"]`) as well as a pytree.

    Attributes:
      corr: Pearson r. mae, rmse: mean absolute / root-mean-square error.
      bias: mean(credit - reference). count: number of masked entries.
    """

    corr: chex.Array
    mae: chex.Array
    rmse: chex.Array
    bias: chex.Array
    count: chex.Array


def calibration_metrics(credit: chex.Array, reference: chex.Array,
                        mask: chex.Array) -> CalibrationMetrics:
    """TAC credit vs an independent high-sample MC credit on the masked actions.

    Arrays of any equal shape. Returns CalibrationMetrics (corr, mae, rmse, bias, count).
    """
    chex.assert_equal_shape([credit, reference, mask])
    m = mask.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(m), 1.0)
    x = jnp.where(mask, credit, 0.0)
    y = jnp.where(mask, reference, 0.0)
    mx, my = jnp.sum(x) / n, jnp.sum(y) / n
    dx, dy = (x - mx) * m, (y - my) * m
    cov = jnp.sum(dx * dy)
    corr = cov / jnp.sqrt(jnp.maximum(jnp.sum(dx**2) * jnp.sum(dy**2), 1e-30))
    err = (x - y) * m
    return CalibrationMetrics(corr=corr, mae=jnp.sum(jnp.abs(err)) / n,
                              rmse=jnp.sqrt(jnp.sum(err**2) / n), bias=jnp.sum(err) / n,
                              count=jnp.sum(m))


def extreme_tokens(weights: chex.Array, token_mask: chex.Array) -> Tuple[chex.Array, chex.Array]:
    """Indices of the highest- and lowest-allocated real token of each action.

    For the perturbation diagnostic. Returns (argmax [B, T], argmin [B, T]) int32 (0 for
    an empty action).
    """
    chex.assert_equal_shape([weights, token_mask])
    hi = jnp.argmax(jnp.where(token_mask, weights, -jnp.inf), axis=-1)
    lo = jnp.argmin(jnp.where(token_mask, weights, jnp.inf), axis=-1)
    return hi.astype(jnp.int32), lo.astype(jnp.int32)


def choice_tokens(actions: chex.Array, cand_tokens: chex.Array, cand_mask: chex.Array,
                  token_mask: chex.Array) -> chex.Array:
    """The action tokens at which the actor had a choice under constrained decoding
    (experiments/studies/factor_allocation.py measures the share of credit they get).

    Token j of action y is a choice iff a legal candidate that agrees with y on y_{<j}
    has another token at j:

      choice_j = OR_k [ legal_k  AND  c_{k,<j} = y_{<j}  AND  c_{k,j} != y_j ]

    Elsewhere the constraint leaves one continuation, so log pi(y_j | x, y_<j) = 0 for
    every parameter (no gradient) and delta_j = 0 whatever the teacher reads: credit on
    such a *forced* token moves nothing (a free-form LLM action has no forced tokens).

    Args:
      actions: [..., A] int, the action's tokens (EOS then PAD).
      cand_tokens: [..., K, A] int, the candidates it was chosen from.
      cand_mask: [..., K] bool, legal candidates.
      token_mask: [..., A] bool, real action tokens.
    Returns:
      [..., A] bool, a subset of token_mask.
    """
    chex.assert_rank([actions, token_mask], cand_mask.ndim)
    chex.assert_rank(cand_tokens, actions.ndim + 1)
    chex.assert_equal_shape([actions, token_mask])
    chex.assert_equal_shape_prefix([cand_tokens, cand_mask], cand_mask.ndim)
    same = cand_tokens == actions[..., None, :]                        # [..., K, A]
    # c_{k,<j} = y_{<j}: an exclusive running AND along the tokens.
    prefix = jnp.cumprod(jnp.concatenate(
        [jnp.ones_like(same[..., :1]), same[..., :-1]], axis=-1), axis=-1).astype(bool)
    other = cand_mask[..., None] & prefix & ~same
    return jnp.any(other, axis=-2) & token_mask


# ------------------------------------------------------------------ (a) conservation

@chex.dataclass(frozen=True)
class Conservation:
    """Panel (a): per-action conservation errors of APM and of the no-APM softmax.

    Attributes:
      real: [B, T] bool, actions with at least one real token.
      weights_softmax: [B, T, A] float, softmax_weights of the same scores.
      cons_apm: [B, T] float, conservation_error of the APM weights (0 off `real`).
      cons_softmax: [B, T] float, the same for the softmax weights (1 - 1/L_t).
    """

    real: chex.Array
    weights_softmax: chex.Array
    cons_apm: chex.Array
    cons_softmax: chex.Array


def conservation(weights: chex.Array, scores: chex.Array, token_mask: chex.Array,
                 tau: float = 1.0) -> Conservation:
    """|mean_j omega_{t,j} - 1| of FACTOR's APM weights and, for contrast, of the softmax
    weights (sum to 1) computed from the same HTA scores.

    Args:
      weights: [B, T, A] float, APM weights omega. scores: [B, T, A] float, HTA scores.
      token_mask: [B, T, A] bool. tau: as softmax_weights.
    Returns:
      Conservation.
    """
    chex.assert_equal_shape([weights, scores, token_mask])
    soft = softmax_weights(scores, token_mask, tau=tau)
    real = jnp.any(token_mask, axis=-1)
    cons = lambda w: jnp.where(real, conservation_error(w, token_mask), 0.0)  # noqa: E731
    return Conservation(real=real, weights_softmax=soft, cons_apm=cons(weights),
                        cons_softmax=cons(soft))


# ------------------------------------------------------------------ (b) calibration

def mc_state_values(env, env_params, policy_fn: Callable, states: Any, keys: chex.Array,
                    num_rollouts: int, batch_size: int) -> chex.Array:
    """V_MC(x) = mean return of `num_rollouts` rollouts of the policy from each state.

      V_MC(x_n) = (1/M) sum_m G^(m)(x_n)

    Args:
      env, env_params: the JAX environment. policy_fn: pi_old at one state, as the
        continuations play it (asct_jax.rl.credit.state_actor), or a PolicyFn
        state -> (logp [K], value []) (state_policy_fn).
      states: env state pytree with leading [N]. keys: [N] PRNG keys.
      num_rollouts: M (static). batch_size: states per jax.lax.map chunk (memory).
    Returns:
      [N] float32.
    """
    one = lambda a: mc_return(env, env_params, a[0], policy_fn, a[1], num_rollouts)[0]  # noqa: E731
    return jax.lax.map(one, (states, keys), batch_size=batch_size)


@chex.dataclass(frozen=True)
class StateOutcomes:
    """M rollouts of pi_old from each of N states (mc_state_outcomes). Each field [N].

    Attributes:
      outcome: mean raw outcome G (the env's info field, or the return) of the rollouts
        that ended within the critic's horizon (0 where none did), what the critic's
        targets average (factor_jax.continuations.continuation_outcomes).
      scored: bool, at least one rollout ended within the horizon.
      ret: mean return to go of all M rollouts to the end (mc_state_values' V_MC, the
        environment's reward coordinate).
      outcome_var: the sampling variance of `outcome` estimated from its rollouts,
        s^2 / n (s^2 with n - 1; 0 for n < 2).
    """

    outcome: chex.Array
    scored: chex.Array
    ret: chex.Array
    outcome_var: chex.Array


def mc_state_outcomes(env, env_params, policy_fn: Callable, states: Any, keys: chex.Array,
                      prefix_returns: chex.Array, num_rollouts: int, horizon: int,
                      outcome_key: str, batch_size: int) -> StateOutcomes:
    """The outcome and the return to go of M rollouts of pi_old from each state, from the
    same rollouts (the same key use as mc_return and as the critic's continuations, so
    that V_MC equals mc_state_values' and each rollout that ends within `horizon` is the
    continuation the critic would have scored):

      outcome(x_n) = mean_{m: ended within horizon} G^(m)(x_n),   ret(x_n) = (1/M) sum_m R^(m)_{>=t}

    Args:
      env, env_params, policy_fn: as mc_state_values. states: env state pytree with
        leading [N]. keys: [N] PRNG keys. prefix_returns: [N] float, the return before
        each state (the outcome "return" adds it).
      num_rollouts: M, horizon: the critic's continuation horizon, outcome_key: G's info
        field or "return" (static).
      batch_size: states per jax.lax.map chunk (memory).
    Returns:
      StateOutcomes of [N] arrays.
    """
    def rollout(state, key, prefix):
        out = play_from(env, env_params, policy_fn, state, key, env.max_turns)
        ret = out.ret.astype(jnp.float32)
        g = episode_outcome(env, env_params, out.state, outcome_key, prefix + ret)
        return g, out.done & (out.calls <= horizon), ret

    def one(a):
        state, key, prefix = a
        g, ended, ret = jax.vmap(lambda k: rollout(state, k, prefix))(
            jax.random.split(key, num_rollouts))
        n = jnp.sum(ended)
        mean = jnp.sum(jnp.where(ended, g, 0.0)) / jnp.maximum(n, 1)
        ss = jnp.sum(jnp.where(ended, (g - mean) ** 2, 0.0))
        var = jnp.where(n > 1, ss / jnp.maximum(n - 1, 1) / jnp.maximum(n, 1), 0.0)  # s^2 / n
        return StateOutcomes(outcome=mean, scored=n > 0, ret=jnp.mean(ret), outcome_var=var)

    return jax.lax.map(one, (states, keys, jnp.asarray(prefix_returns, jnp.float32)),
                       batch_size=batch_size)


def mc_noise_var(outcome: chex.Array, scored: chex.Array, scale: chex.Array,
                 num_rollouts: int) -> chex.Array:
    """A bound on the sampling variance of each V_MC (a mean of M outcomes in [0, 1]:
    Bernoulli's variance bounds theirs), in a coordinate that is `scale` x the outcome
    plus a constant:

      var(x) <= scale^2 clip(p, 0, 1) (1 - clip(p, 0, 1)) / M,   p = the mean outcome,

    0 where nothing was scored (the value is then a trajectory's own outcome).

    Args:
      outcome, scored, scale: arrays of one shape (or broadcasting), floats / bool.
    Returns:
      float32 like outcome.
    """
    p = jnp.clip(outcome, 0.0, 1.0)
    return jnp.where(scored, scale**2 * p * (1.0 - p) / num_rollouts, 0.0).astype(jnp.float32)


def mc_credit(rewards: chex.Array, mc_values: chex.Array, baseline: chex.Array,
              turn_mask: chex.Array) -> chex.Array:
    """The Monte-Carlo reference credit, with TAC's boundaries:

      A^MC_t = r_t + V_MC(x_{t+1}) - V_MC(x_t),   V(x_0) = b,  V(x_T) = 0.

    In TAC's coordinate (Figure 5's panel b) r_t is TAC's (factor_jax.tac_rewards) and
    V_MC the expected critic target (mc_state_outcomes' outcome through
    factor_jax.continuations.outcome_targets): an exact critic then gives A*_t = A^MC_t.

    Args:
      rewards, mc_values: [B, T] float (mc_values read where 0 < t < T_i).
      baseline: [B] float. turn_mask: [B, T] bool.
    Returns:
      [B, T] float, 0 on padded turns.
    """
    return tac_credit(rewards, mc_values, baseline, turn_mask)


def mc_references(tac_rewards: chex.Array, env_rewards: chex.Array, baseline: chex.Array,
                  returns: chex.Array, turn_mask: chex.Array, outcome: chex.Array,
                  scored: chex.Array, ret: chex.Array, group_size: int, rule: str,
                  num_rollouts: int, outcome_var=None) -> Dict[str, chex.Array]:
    """Panel (b)'s two Monte-Carlo credits, from mc_state_outcomes at every x_t, t >= 1:

      TAC's coordinate ("a_mc", "v_mc"; the panel's reference):
        V_MC(x_t) = outcome_targets(outcome, scored): the expected critic target (the mean
                    outcome in the reward coordinate of the trajectory's group)
        A^MC_t    = r_t + V_MC(x_{t+1}) - V_MC(x_t), r_t TAC's, V(x_0) = b, V(x_T) = 0
        so a critic equal to V_MC gives TAC's credit A*_t = A^MC_t exactly;
      the environment's coordinate ("a_mc_env", "v_mc_env"; the reference before issue 38):
        V_MC(x_t) = ret, the mean return to go; A^MC with the environment's rewards.
    "var", "var_env": mc_noise_var of each V_MC (the coordinate's scale, d V / d outcome:
    1, or 1 / (sigma + 1e-8) of the group under "standardise"); "unscored": no rollout
    ended within the critic's horizon (V_MC is then the trajectory's G, as the target).
    With outcome_var (StateOutcomes'): "var_est", the estimated sampling variance of
    V_MC in TAC's coordinate (scale^2 outcome_var; 0 where unscored).

    Args:
      tac_rewards: [B, T] TAC's r_t (factor_jax.tac_rewards). env_rewards: [B, T].
      baseline: [B] V~(x_0). returns: [B] G (the groups' outcomes set the coordinate).
      turn_mask: [B, T] bool. outcome, scored, ret: [B, T] (read where 0 < t < T_i).
      group_size, rule (reward_construction's), num_rollouts: static.
    Returns:
      dict of [B, T] arrays (0 at t = 0 and on padding but the credits' t = 0).
    """
    chex.assert_equal_shape([tac_rewards, env_rewards, turn_mask, outcome, scored, ret])
    inner = turn_mask & (jnp.arange(turn_mask.shape[1])[None, :] >= 1)
    coord = lambda o, s: outcome_targets(o, s, returns, group_size, rule)  # noqa: E731
    v_mc = jnp.where(inner, coord(outcome, scored), 0.0)
    scale = coord(jnp.ones_like(outcome), True) - coord(jnp.zeros_like(outcome), True)
    v_env = jnp.where(inner, ret, 0.0).astype(jnp.float32)
    noise = lambda o, s, c: jnp.where(inner, mc_noise_var(o, s, c, num_rollouts), 0.0)  # noqa: E731
    return {"a_mc": mc_credit(tac_rewards, v_mc, baseline, turn_mask), "v_mc": v_mc,
            "a_mc_env": mc_credit(env_rewards, v_env, baseline, turn_mask),
            "v_mc_env": v_env, "var": noise(outcome, scored, scale),
            "var_env": noise(ret, True, 1.0), "unscored": inner & ~scored,
            **({} if outcome_var is None else {"var_est": jnp.where(
                inner & scored, scale**2 * outcome_var, 0.0).astype(jnp.float32)})}


# ------------------------------------------------------------------ (c) perturbation

def perturbable_actions(credit: chex.Array, weights: chex.Array, token_mask: chex.Array,
                        min_abs_credit: float) -> Tuple[chex.Array, chex.Array,
                                                        chex.Array, chex.Array]:
    """Actions eligible for the perturbation panel, and their extreme tokens.

    Eligible: at least two real tokens, distinct highest- and lowest-weighted tokens, and
    A*_t >= min_abs_credit (positive) or A*_t <= -min_abs_credit (negative).

    Args:
      credit: [B, T] float, A*_t. weights: [B, T, A] float. token_mask: [B, T, A] bool.
      min_abs_credit: |A*_t| below this counts as neither sign.
    Returns:
      (positive [B, T] bool, negative [B, T] bool, hi [B, T] int32, lo [B, T] int32),
      hi / lo as extreme_tokens.
    """
    chex.assert_equal_shape_prefix([credit, weights, token_mask], 2)
    hi, lo = extreme_tokens(weights, token_mask)
    ok = jnp.any(token_mask, axis=-1) & (jnp.sum(token_mask, axis=-1) >= 2) & (hi != lo)
    return ok & (credit >= min_abs_credit), ok & (credit <= -min_abs_credit), hi, lo


def perturbed_actions(actions: chex.Array, hi: chex.Array, lo: chex.Array,
                      cands: chex.Array, legal: chex.Array, modes: Sequence[str],
                      filler: int, unk: int) -> chex.Array:
    """The original action, then for each mode its highest- and lowest-allocated token
    replaced: [N, A] -> [N, V, A], V = 1 + 2 len(modes), order (orig, m0 hi, m0 lo, ...).

      "delete": token -> `filler` (a word every parser drops: the token is deleted).
      "swap":   token -> the token another legal candidate has at that position, that
                candidate being equal to the action everywhere else; `filler` where no
                such candidate exists.
      "unk":    token -> `unk` (the action becomes unparseable).

    Args:
      actions: [N, A] int32. hi, lo: [N] int, token positions.
      cands: [N, K, A] int32, legal: [N, K] bool: the candidates at x_t (for "swap").
      modes: static sequence of "delete" | "swap" | "unk". filler, unk: token ids.
    Returns:
      [N, V, A] int32.
    """
    chex.assert_rank([actions, hi, lo, cands, legal], [2, 1, 1, 3, 2])
    a_len = actions.shape[-1]
    out = [actions]
    for mode in modes:
        for j in (hi, lo):
            onehot = jax.nn.one_hot(j, a_len, dtype=bool)  # [N, A]
            if mode == "swap":
                # Another legal candidate equal to the action everywhere but at j.
                same = cands == actions[:, None, :]  # [N, K, A]
                other = legal & jnp.all(same | onehot[:, None, :], axis=-1) & \
                    ~jnp.any(same & onehot[:, None, :], axis=-1)
                k = jnp.argmax(other, axis=-1)
                sub = jnp.take_along_axis(cands[jnp.arange(len(k)), k], j[:, None], -1)[:, 0]
                tok = jnp.where(jnp.any(other, axis=-1), sub, filler)[:, None]
            else:
                tok = filler if mode == "delete" else unk
            out.append(jnp.where(onehot, tok, actions))
    return jnp.stack(out, axis=1)


def divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of n that is <= cap (lax.map batch size without a remainder,
    which would compile the body twice)."""
    return next(b for b in range(min(n, cap), 0, -1) if n % b == 0)


def perturbation_returns(env, env_params, policy_fn: Callable, states: Any,
                         variants: chex.Array, keys: chex.Array,
                         chunk: int) -> Tuple[chex.Array, chex.Array]:
    """Return of each action variant from its stored state, with common random numbers.

      ret_{n,v,r} = r_t(a_{n,v}) + G_{>t}^{(r)}   (step a_{n,v} from x_n, then the policy
                                                  to the end with key r, the same key for
                                                  every variant v)

    Args:
      env, env_params, policy_fn: as mc_state_values.
      states: env state pytree with leading [N]. variants: [N, V, A] int32
        (perturbed_actions; v = 0 the original). keys: [N, R] PRNG keys.
      chunk: lanes per jax.lax.map chunk (memory; a divisor of N V R is used).
    Returns:
      (returns [N, V, R] float32, changed [N, V] bool: the immediate feedback or reward
      differs from the original's, first rollout).
    """
    n, nv, a_len = variants.shape
    r = keys.shape[1]
    lane_states = jax.tree.map(
        lambda x: jnp.broadcast_to(x[:, None, None], (n, nv, r) + x.shape[1:]).reshape(
            (n * nv * r,) + x.shape[1:]), states)
    lane_actions = jnp.broadcast_to(variants[:, :, None], (n, nv, r, a_len)).reshape(-1, a_len)
    lane_keys = jnp.broadcast_to(keys[:, None], (n, nv, r)).reshape(-1)  # same keys per v

    def one(args):
        s, a, k = args
        s1, ts = env.step(s, a, env_params)
        g, _, _ = rollout_return(env, env_params, s1, policy_fn, k)
        return ts.reward + g, ts.feedback, ts.reward

    ret, fb, rew = jax.lax.map(one, (lane_states, lane_actions, lane_keys),
                               batch_size=divisor_at_most(n * nv * r, int(chunk)))
    ret = ret.reshape(n, nv, r)
    fb = fb.reshape(n, nv, r, -1)[:, :, 0]
    rew = rew.reshape(n, nv, r)[:, :, 0]
    changed = jnp.any(fb != fb[:, :1], axis=-1) | (rew != rew[:, :1])
    return ret, changed
