"""FACTOR, its ablations, SERL and ASCT + FACTOR as credit methods (`Method` records,
see asct_jax.rl.credit; docs/methods.md, FACTOR).

Each FACTOR method composes two stages (docs/methods.md, FACTOR > Ablations): an action
credit ("how much": tac_action_credit | grpo_action_credit) and token weights ("where":
apm_token_weights | uniform_token_weights | softmax_token_weights), then C = A_t omega.

factor            TAC -> HTA + APM over the choice tokens (factor.alloc_tokens),
                  calibrated values, action-mean
factor_no_tac     GRPO action credit -> HTA + APM
factor_no_hta     TAC -> omega = 1
factor_no_apm     TAC -> HTA + softmax weights (sum to 1: credit shrunk by 1/L_t)
serl              GRPO advantage with clipped hindsight token weights, lambda 0.5 -> 0
grpo_extended     GRPO; the experiment gives it FACTOR's environment-call budget by
                  scaling rollout.num_groups (experiments/factor_table.py)
asct_factor       ASCT-AgentUCT's searched A_t as "how much", HTA + APM as "where";
                  mean_j C_{t,j} = A_t per action, as in FACTOR

Value calibration (docs/methods.md, FACTOR > Value calibration): for each episode,
`factor.calib_turns` intermediate turns are chosen (factor_jax.calibration_turns), the
stored environment state of each is restored and pi_old is rolled out
`factor.calib_rollouts` = M times to the end. The mean
return-to-go is the Monte-Carlo target of the value head at that turn, and (with
`factor.tac_values = "calibrated"`) replaces V_psi(x_t) inside TAC there:

    V~(x_t) = MC_t if t was calibrated, else V_psi(x_t);  V~(x_0) = b;  V~(x_T) = 0.

Elsewhere the value head regresses on the episode's own return-to-go. Host games
calibrate outside the jitted step and hand the result in as `batch.extras`, a
`Calibration` (factor_jax.host_calibration); it is then used instead.

Scale: with `factor.normalise = "batch_std"` (default) the coefficients are divided by
max(std of the batch's returns, factor.std_floor), one scalar per batch, as GRPO divides
by its group std; "none" keeps reward units. Every calibration
step is counted in metrics["env_calls"] and its action tokens in metrics["aux_tokens"].

The hindsight teacher is pi_old (the behaviour parameters, frozen for the update) reading
[x_t | SEP o_{t+1} | y_t]; the student log-probs are logp_old.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Tuple

import chex
import jax
import jax.numpy as jnp

import factor_jax as fj
from asct_jax.infra.checks import Range
from asct_jax.infra.typed_config import from_section, option
from asct_jax.rl import advantages as adv
from asct_jax.rl.credit import (CreditContext, Method, state_policy_fn, turn_states,
                                value_targets_mc)
from asct_jax.rl.methods import GRPO
from asct_jax.rl.types import Credit, Rollout
from asct_jax.rl.types import merge_batch_turns as _flat
from asct_jax.search.methods import ASCTConfig, asct_config, searched_advantages
from asct_jax.search.rollout_value import mc_return
from factor_jax.calibration import Calibration
from factor_jax.host_calibration import calibrate_on_host


TAC_VALUES = ("calibrated", "critic")   # factor.tac_values: V~ at calibrated turns
NORMALISE = ("batch_std", "none")       # factor.normalise: scale of the coefficients
ALLOC_TOKENS = ("choice", "all")        # factor.alloc_tokens: what HTA + APM weigh


@dataclasses.dataclass(frozen=True)
class FactorConfig:
    """FACTOR's fields (section factor)."""

    calib_turns: int = option(Range(0, None, integer=True),
                              "intermediate turns calibrated per episode")
    calib_rollouts: int = option(Range(0, None, integer=True),
                                 "M rollouts of pi_old from each restored state")
    tac_values: str = option(TAC_VALUES, "V~ at calibrated turns: the MC mean or the critic")
    tau: float = option(Range(0.0, None, lo_open=True), "APM temperature")
    transform: str = option(fj.TRANSFORMS, "APM score transform")
    clip: Tuple[float, ...] = option(None, "() or (lo, hi): clip omega, then renormalise")
    distill_coef: float = option(Range(0.0, None), "weight of the distillation to the teacher")
    alloc_tokens: str = option(ALLOC_TOKENS, "tokens HTA + APM weigh")
    normalise: str = option(NORMALISE, "scale of the coefficients")
    std_floor: float = option(Range(0.0, None, lo_open=True), "floor of the batch std")


@dataclasses.dataclass(frozen=True)
class SerlConfig:
    """SERL's fields (section serl)."""

    lam0: float = option(Range(0.0, 1.0), "lambda at step 0")
    decay_steps: int = option(Range(0, None, integer=True), "steps of lambda's decay to 0")


@dataclasses.dataclass(frozen=True)
class AsctFactorConfig:
    """asct_factor's fields: ASCT's search (section asct) and FACTOR's allocation (factor)."""

    asct: ASCTConfig
    factor: FactorConfig


def factor_config(config) -> FactorConfig:
    """FactorConfig of config.factor (ConfigError naming factor.<field> on a bad value)."""
    return from_section(FactorConfig, config, "factor")


def asct_factor_config(config) -> AsctFactorConfig:
    return AsctFactorConfig(asct=asct_config(config), factor=factor_config(config))


def allocation_mask(alloc_tokens: str, batch: Rollout):
    """[B, T, A] bool, the tokens HTA + APM spread an action's credit over: "choice", the
    tokens where constrained decoding left the actor a choice (fj.choice_tokens; a forced
    token has no gradient, so credit put there is lost), or "all" real action tokens."""
    if alloc_tokens == "all":
        return batch.token_mask
    return fj.choice_tokens(batch.actions, batch.cand_tokens, batch.cand_mask,
                            batch.token_mask)


def teacher_log_probs(ctx: CreditContext, params, batch: Rollout):
    """Hindsight teacher log-probs [B, T, A] (0 on padding)."""
    b, t = batch.turn_mask.shape
    logp = ctx.policy.teacher_log_probs(params, _flat(batch.obs), _flat(batch.feedback),
                                        _flat(batch.actions), _flat(batch.cand_tokens),
                                        _flat(batch.cand_mask))
    return jnp.where(batch.token_mask, logp.reshape(b, t, -1), 0.0)


def calibrate(ctx: CreditContext, params, batch: Rollout, key, num_turns: int,
              num_rollouts: int) -> Calibration:
    """Monte-Carlo values at chosen intermediate turns (docs/methods.md, FACTOR > Value
    calibration): Calibration(targets [B, T], mask [B, T], aux_tokens [], env_calls [])."""
    b, t = batch.turn_mask.shape
    k_turns, k_roll = jax.random.split(key)
    idx, valid = fj.calibration_turns(batch.turn_mask, k_turns, num_turns)  # [B, S]
    states = jax.tree.map(_flat, turn_states(batch, idx))
    policy_fn = state_policy_fn(ctx, params)
    keys = jax.random.split(k_roll, b * idx.shape[1])
    mean, returns, aux, calls = jax.vmap(
        lambda s, k: mc_return(ctx.env, ctx.env_params, s, policy_fn, k, num_rollouts))(
        states, keys)
    valid_f = valid.reshape(-1)
    returns = returns.reshape(b, idx.shape[1], num_rollouts)
    targets, mask = fj.calibration_targets(idx, valid, returns, t)
    aux = jnp.sum(jnp.where(valid_f, aux, 0.0))
    calls = jnp.sum(jnp.where(valid_f, calls, 0)).astype(jnp.float32)
    return Calibration(targets=targets, mask=mask, aux_tokens=aux, env_calls=calls)


@chex.dataclass(frozen=True)
class FactorPieces:
    """Everything a FACTOR credit computes for a batch (factor_pieces; Figure 5 reads it).

    Attributes:
      coef: [B, T, A] C_{t,j}, scaled as factor.normalise says.
      credit: [B, T] the action credit A_t (TAC's A*_t, GRPO's for factor_no_tac).
      scores: [B, T, A] HTA scores s_{t,j}. weights: [B, T, A] omega_{t,j}, mean 1 over
        the action's alloc_mask tokens, 0 elsewhere.
      alloc_mask: [B, T, A] bool, the tokens the weights spread over (allocation_mask).
      teacher: [B, T, A] hindsight-teacher log-probs.
      values: [B, T] V~ (critic, replaced by MC values at calibrated turns).
      targets: [B, T] value-head targets. calibrated: [B, T] bool, calibrated turns.
      baseline: [B] group baseline b. returns: [B] episode returns G.
      aux_tokens, env_calls: [] float32, the calibration's cost.
    """

    coef: chex.Array
    credit: chex.Array
    scores: chex.Array
    weights: chex.Array
    alloc_mask: chex.Array
    teacher: chex.Array
    values: chex.Array
    targets: chex.Array
    calibrated: chex.Array
    baseline: chex.Array
    returns: chex.Array
    aux_tokens: chex.Array
    env_calls: chex.Array


# The two stages a FACTOR method chooses (docs/methods.md, FACTOR > Ablations):
#   action credit  (batch, values V~ [B, T], baseline b [B], returns G [B], group size)
#                  -> A_t [B, T], 0 on padded turns: "how much";
#   token weights  (FactorConfig) -> weigh(scores, token_mask) -> omega [B, T, A]: "where".
ActionCredit = Callable[[Rollout, Any, Any, Any, int], Any]
TokenWeightsFor = Callable[[Any], fj.coefficients.TokenWeights]


def tac_action_credit(batch: Rollout, values, baseline, returns, group_size):
    """A*_t = r_t + V~(x_{t+1}) - V~(x_t) (TAC). [B, T]."""
    return fj.tac_credit(batch.rewards, values, baseline, batch.turn_mask)


def grpo_action_credit(batch: Rollout, values, baseline, returns, group_size):
    """A_t = (G_i - b) / std on every real turn (GRPO's; the "without TAC" ablation)."""
    a = adv.grpo_advantages(returns, group_size)
    a = jnp.broadcast_to(a[:, None], batch.turn_mask.shape)
    return jnp.where(batch.turn_mask, a, 0.0)


def apm_token_weights(fc) -> fj.coefficients.TokenWeights:
    """HTA + APM: mean-1 weights from the hindsight scores (factor.tau/transform/clip)."""
    clip = tuple(fc.clip) if fc.clip else None
    return functools.partial(fj.apm_weights, tau=fc.tau, transform=fc.transform, clip=clip)


def softmax_token_weights(fc) -> fj.coefficients.TokenWeights:
    """HTA + softmax, weights summing to 1 (the "without APM" ablation)."""
    if fc.clip:
        raise ValueError(f"factor.clip applies only to APM weights, got {tuple(fc.clip)!r} "
                         "with the softmax weights of factor_no_apm")
    return functools.partial(fj.softmax_weights, tau=fc.tau, transform=fc.transform)


def uniform_token_weights(fc) -> fj.coefficients.TokenWeights:
    """omega = 1 on every real token (the "without HTA" ablation)."""
    return lambda scores, token_mask: fj.uniform_weights(token_mask, scores.dtype)


def factor_pieces(fc: FactorConfig, ctx: CreditContext, params, batch: Rollout, key,
                  action_credit: ActionCredit = tac_action_credit,
                  token_weights: TokenWeightsFor = apm_token_weights) -> FactorPieces:
    """Everything a FACTOR credit computes for a batch (also used by Figure 5):
    value calibration -> action credit -> HTA scores -> token weights -> C.

    The defaults are `factor` (TAC, HTA + APM); the ablations pass other stages.
    """
    g = adv.episode_returns(batch.rewards, batch.turn_mask)
    b = adv.group_baseline(g, ctx.group_size)
    mc_g = value_targets_mc(batch)
    values, targets = batch.values, mc_g
    cal_mask = jnp.zeros_like(batch.turn_mask)
    aux = calls = jnp.float32(0.0)
    cal = batch.extras               # calibrated outside the step (host games), or None
    if cal is None and fc.calib_turns > 0 and fc.calib_rollouts > 0:
        cal = calibrate(ctx, params, batch, key, fc.calib_turns, fc.calib_rollouts)
    if cal is not None:
        cal_mask, aux, calls = cal.mask, cal.aux_tokens, cal.env_calls
        targets = jnp.where(cal_mask, cal.targets, mc_g)
        if fc.tac_values == "calibrated":
            values = jnp.where(cal_mask, cal.targets, values)  # V~ = MC_t where calibrated
    teacher = teacher_log_probs(ctx, params, batch)
    credit = action_credit(batch, values, b, g, ctx.group_size)
    alloc_mask = allocation_mask(fc.alloc_tokens, batch)
    coef, alloc = fj.hindsight_allocation(credit, teacher, batch.logp_old, alloc_mask,
                                          token_weights(fc))
    if fc.normalise == "batch_std":
        # One positive scalar for the whole batch: conservation per action and the
        # telescoping identity hold up to that scale, and the coefficients live on
        # GRPO's (std-normalised) scale, so both train at the same learning rate.
        coef = coef / jnp.maximum(jnp.std(g), fc.std_floor)
    return FactorPieces(coef=coef, credit=credit, scores=alloc.scores, weights=alloc.weights,
                        alloc_mask=alloc_mask, teacher=teacher, values=values, targets=targets, calibrated=cal_mask,
                        baseline=b, returns=g, aux_tokens=aux, env_calls=calls)


def _factor_factory(action_credit: ActionCredit = tac_action_credit,
                    token_weights: TokenWeightsFor = apm_token_weights):
    def factory(fc: FactorConfig, ctx: CreditContext):
        token_weights(fc)  # configuration errors at build time

        def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
            p = factor_pieces(fc, ctx, params, batch, key, action_credit, token_weights)
            real = jnp.any(batch.token_mask, axis=-1)
            alloc = jnp.any(p.alloc_mask, axis=-1)   # actions with a token to allocate to
            cons = jnp.where(alloc, fj.conservation_error(p.weights, p.alloc_mask), 0.0)
            metrics = {
                "aux_tokens": p.aux_tokens, "env_calls": p.env_calls,
                "factor/conservation_err_max": jnp.max(cons),
                "factor/credit_abs_mean": jnp.sum(jnp.abs(p.credit) * real)
                / jnp.maximum(jnp.sum(real), 1),
            }
            loss_inputs = p.teacher if fc.distill_coef > 0 else None
            return Credit(coef=p.coef, value_targets=p.targets, metrics=metrics,
                          loss_inputs=loss_inputs)
        return credit
    return factory


def _distillation(fc: FactorConfig, ctx: CreditContext):
    """FACTOR's distillation toward the hindsight teacher (factor.distill_coef > 0):
    aux_loss(logp, mb, credit_mb) = distill_coef * KL estimate, reading the teacher's
    log-probs from credit_mb.loss_inputs; None at weight 0."""
    if fc.distill_coef <= 0:
        return None

    def aux_loss(logp, mb: Rollout, credit: Credit):
        loss, m = fj.distillation_loss(logp, credit.loss_inputs, mb.token_mask)
        return fc.distill_coef * loss, m
    return aux_loss


def _serl(sc: SerlConfig, ctx: CreditContext):
    """SERL: C = A_i ((1 - lam) + lam w), w = clip(exp(clamp(sign(A) delta, -20, 20)), .8, 1.2)."""

    def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
        g = adv.episode_returns(batch.rewards, batch.turn_mask)
        a = adv.grpo_advantages(g, ctx.group_size)
        teacher = teacher_log_probs(ctx, params, batch)
        delta = fj.hindsight_delta(teacher, batch.logp_old, batch.token_mask)
        lam = fj.serl_lambda(step, sc.lam0, sc.decay_steps)
        coef = fj.serl_coefficients(a, delta, batch.token_mask, lam)
        return Credit(coef=coef, value_targets=value_targets_mc(batch),
                      metrics={"aux_tokens": jnp.float32(0.0), "env_calls": jnp.float32(0.0),
                               "serl/lambda": jnp.asarray(lam, jnp.float32)})
    return credit


def _asct_factor(cfg: AsctFactorConfig, ctx: CreditContext):
    """ASCT-AgentUCT's A_t as the action credit, HTA + APM (unclipped) as the token
    allocation."""
    fc = cfg.factor
    weigh = functools.partial(fj.apm_weights, tau=fc.tau, transform=fc.transform)

    def credit(params, batch: Rollout, key, step, mstate=None):
        a, metrics = searched_advantages(cfg.asct, ctx, params, batch, key, step, "agentuct")
        teacher = teacher_log_probs(ctx, params, batch)
        coef, _ = fj.hindsight_allocation(a, teacher, batch.logp_old,
                                          allocation_mask(fc.alloc_tokens, batch), weigh)
        return Credit(coef=coef, value_targets=value_targets_mc(batch), metrics=metrics)
    return credit


def _factor_method(name: str, factory) -> Method:
    return Method(name, factory, make_config=factor_config, make_aux_loss=_distillation,
                  host_prepare=calibrate_on_host)


FACTOR = _factor_method("factor", _factor_factory())
FACTOR_NO_TAC = _factor_method("factor_no_tac",
                               _factor_factory(action_credit=grpo_action_credit))
FACTOR_NO_HTA = _factor_method("factor_no_hta",
                               _factor_factory(token_weights=uniform_token_weights))
FACTOR_NO_APM = _factor_method("factor_no_apm",
                               _factor_factory(token_weights=softmax_token_weights))
SERL = Method("serl", _serl,
              make_config=functools.partial(from_section, SerlConfig, section="serl"))
GRPO_EXTENDED = dataclasses.replace(GRPO, name="grpo_extended")
ASCT_FACTOR = Method("asct_factor", _asct_factor, make_config=asct_factor_config,
                     restores_states_in_step=True)
METHODS = (FACTOR, FACTOR_NO_TAC, FACTOR_NO_HTA, FACTOR_NO_APM, SERL, GRPO_EXTENDED,
           ASCT_FACTOR)
