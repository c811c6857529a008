"""The FACTOR paper's baselines as credit methods (`Method` records, see
asct_jax.rl.credit; docs/methods.md, Baselines > SERL and Extended-compute GRPO):

serl           GRPO advantage (verl-agent's step samples and penalty placement, as
               asct_jax.rl.methods' GRPO), action tokens of the rows with a teacher prompt reweighted
               by clipped exp(sign(A) Delta), Delta from the current policy in each
               minibatch's pass (the policy-loss plug-in); lam 0.5 -> 0 over 50 steps;
               teacher = a copy of the policy re-synced every 10 steps (method state);
               as its authors' code (OliverLeeXZ/SERL)
grpo_extended  GRPO; the experiment gives it FACTOR's environment-call budget

SERL's step constants (10 and 50) are its code's, not scaled to the run length
(serl.scale_schedules = False); scaling them to train.steps like FACTOR's (given for 150
steps) stays an option. The kernels are factor_jax.serl.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

import factor_jax as fj
from asct_jax.infra.checks import Range
from asct_jax.infra.typed_config import from_section, option
from asct_jax.rl import group_advantages as gadv
from asct_jax.rl import losses
from asct_jax.rl.credit import CreditContext, Method, any_over_seeds, value_targets_mc
from asct_jax.rl.methods import GRPO, PENALTY_PLACEMENTS, VERL, group_rewards
from asct_jax.rl.types import Credit, Rollout, action_tokens
from factor_jax.teacher import TEACHER_PROMPTS, teacher_log_probs

# SERL's recipe (OliverLeeXZ/SERL): verl-agent's update (asct_jax.rl.methods.VERL) without
# the KL to the reference.
SERL_PROTOCOL = dataclasses.replace(VERL, kl_coef=0.0, kl_clamp=0.0)


@dataclasses.dataclass(frozen=True)
class SerlConfig:
    """SERL's fields (section serl)."""

    lam0: float = option(Range(0.0, 1.0), "lambda at the first step")
    decay_steps: int = option(Range(0, None, integer=True), "steps of lambda's decay to 0")
    resync_every: int = option(Range(1, None, integer=True), "teacher re-synced every n steps")
    clip: float = option(Range(0.0, None), "weights clipped to [1 - clip, 1 + clip]")
    train_steps: int = option(None, "train.steps (passed in, not a field of the section)")
    scale_schedules: bool = option((True, False), "scale the step constants to train.steps "
                                   "(False: SERL's, 50 and 10 steps)", default=False)
    teacher_prompt: str = option(TEACHER_PROMPTS, "the teacher's prompt: serl (SERL's "
                                 "wording) or appended (the earlier one)", default="serl")
    stats: str = option(gadv.GROUP_STATS, "samples of GRPO's group mean / std: steps (one "
                        "per real turn, theirs) or episodes", "steps")
    penalty: str = option(PENALTY_PLACEMENTS, "invalid-action penalty: step (off the step's "
                          "own score, theirs) or reward (in r_t)", "step")


def serl_config(config) -> SerlConfig:
    return from_section(SerlConfig, config, "serl", train_steps=int(config.train.steps))


def serl_schedules(sc: SerlConfig):
    """(lambda's decay steps, teacher re-sync period) in steps: SERL's 50 and 10, or
    scaled to train.steps (given for 150 steps) when sc.scale_schedules."""
    if not sc.scale_schedules:
        return sc.decay_steps, sc.resync_every
    decay = fj.scale_steps(sc.decay_steps, sc.train_steps) if sc.decay_steps else 0
    return decay, fj.scale_steps(sc.resync_every, sc.train_steps)


def _serl(sc: SerlConfig, ctx: CreditContext):
    """SERL's credit: the GRPO advantage A of each step sample (`gadv.grpo_step_advantages`,
    [B, T]), the teacher's log-probs and the reweighted
    tokens for the policy loss (serl_policy_loss recomputes w with the current policy);
    coef = A ((1 - lam) + lam w) with Delta from pi_old, for logging only."""
    decay, _ = serl_schedules(sc)

    def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
        r, p = group_rewards(batch, sc.penalty)
        a = gadv.grpo_step_advantages(r, batch.turn_mask, ctx.group_size, penalties=p,
                                      stats=sc.stats)                       # [B, T]
        lam = fj.serl_lambda(step + 1, sc.lam0, decay)
        teacher_params = _join_like(mstate["teacher"], params)
        run = any_over_seeds(lam > 0, ctx)          # lam = 0: pure GRPO, no teacher pass
        teacher = jax.lax.cond(
            run, lambda: teacher_log_probs(ctx, teacher_params, batch, sc.teacher_prompt),
            lambda: batch.logp_old)
        rows = fj.serl_prompted_rows(batch.feedback, batch.turn_mask, ctx.policy.pad_id)
        reweight = action_tokens(batch) & rows[..., None]     # action tokens, serl_mask 1
        delta_old = fj.hindsight_delta(teacher, batch.logp_old, batch.token_mask)
        coef = fj.serl_coefficients(a, delta_old, reweight, batch.token_mask, lam, sc.clip)
        n_rows = jnp.maximum(jnp.sum(batch.turn_mask), 1)
        return Credit(coef=coef, value_targets=value_targets_mc(batch),
                      metrics={"aux_tokens": jnp.float32(0.0), "env_calls": jnp.float32(0.0),
                               "serl/lambda": jnp.asarray(lam, jnp.float32),
                               "serl/prompted_rows": jnp.sum(rows) / n_rows},
                      loss_inputs={"teacher_logp": teacher, "advantage": a,
                                   "reweight": reweight, "lambda": lam})
    return credit


def serl_policy_loss(sc: SerlConfig, ctx: CreditContext):
    """SERL's policy loss: the clipped surrogate (asct_jax.rl.losses.policy_loss) on

      C = A ((1 - lam) + lam w),  w = clip(exp(clip(sign(A) Delta, -20, 20)), 1 - c, 1 + c),
      Delta = sg(log pi_T - log pi_theta)

    with log pi_theta the current policy's log-probs of this minibatch's pass (out.logp),
    on the reweighted tokens of credit_mb.loss_inputs; A elsewhere (SERL's
    compute_serl_action_mask_reweighted_advantages inside the actor's update)."""

    def pg_loss(out, mb: Rollout, credit: Credit, ppo):
        li = credit.loss_inputs
        delta = fj.hindsight_delta(li["teacher_logp"], out.logp, mb.token_mask)  # constant
        coef = fj.serl_coefficients(li["advantage"], delta, li["reweight"], mb.token_mask,
                                    li["lambda"], sc.clip)
        return losses.policy_loss(out.logp, mb.logp_old, coef, mb.token_mask, ppo.clip_eps,
                                  ppo.aggregation, ppo.dual_clip)
    return pg_loss


def _trainable(params):
    """The trained part of join_params-form parameters (LoRA: the adapters)."""
    return params[0] if isinstance(params, tuple) else params


def _join_like(trained, params):
    return (trained,) + tuple(params[1:]) if isinstance(params, tuple) else trained


def _serl_init(sc: SerlConfig, ctx: CreditContext, params, key):
    """SERL's state: the teacher, a copy of the initial policy."""
    return {"teacher": jax.tree.map(jnp.copy, _trainable(params))}


def _serl_update(sc: SerlConfig, ctx: CreditContext, mstate, inputs):
    """Re-sync the teacher to the student after every `resync_every`-th step (SERL's
    teacher_sync_interval)."""
    _, every = serl_schedules(sc)
    sync = (inputs.step + 1) % every == 0
    new = _trainable(inputs.params)
    teacher = jax.tree.map(lambda n, o: jnp.where(sync, n, o), new, mstate["teacher"])
    return {"teacher": teacher}, {"serl_resync": sync.astype(jnp.float32)}


SERL = Method("serl", _serl, make_config=serl_config, make_policy_loss=serl_policy_loss,
              init_state=_serl_init, update_state=_serl_update, protocol=SERL_PROTOCOL)
GRPO_EXTENDED = dataclasses.replace(GRPO, name="grpo_extended")
METHODS = (SERL, GRPO_EXTENDED)
