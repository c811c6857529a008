"""The FACTOR paper's baselines as credit methods (`Method` records, see
asct_jax.rl.credit; docs/methods.md, Baselines > SERL and Extended-compute GRPO):

serl           GRPO advantage, action tokens reweighted by clipped exp(sign(A) Delta),
               lam 0.5 -> 0 over 50 steps; teacher = a copy of the policy re-synced
               every 10 steps (method state); as its authors' code (OliverLeeXZ/SERL)
grpo_extended  GRPO; the experiment gives it FACTOR's environment-call budget

SERL's step constants (10 and 50) are given for 150-step runs and scale with train.steps
(serl.scale_schedules). The kernels are factor_jax.serl.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

import factor_jax as fj
from asct_jax.infra.checks import Range
from asct_jax.infra.typed_config import from_section, option
from asct_jax.rl import advantages as adv
from asct_jax.rl.credit import CreditContext, Method, any_over_seeds, value_targets_mc
from asct_jax.rl.methods import GRPO
from asct_jax.rl.types import Credit, Rollout, action_tokens
from factor_jax.teacher import TEACHER_PROMPTS, teacher_log_probs


@dataclasses.dataclass(frozen=True)
class SerlConfig:
    """SERL's fields (section serl)."""

    lam0: float = option(Range(0.0, 1.0), "lambda at the first step")
    decay_steps: int = option(Range(0, None, integer=True), "steps of lambda's decay to 0")
    resync_every: int = option(Range(1, None, integer=True), "teacher re-synced every n steps")
    clip: float = option(Range(0.0, None), "weights clipped to [1 - clip, 1 + clip]")
    scale_schedules: bool = option((True, False), "scale the step constants to train.steps")
    train_steps: int = option(None, "train.steps (passed in, not a field of the section)")
    teacher_prompt: str = option(TEACHER_PROMPTS, "the teacher's prompt: serl (SERL's "
                                 "wording) or appended (the earlier one)", default="serl")


def serl_config(config) -> SerlConfig:
    return from_section(SerlConfig, config, "serl", train_steps=int(config.train.steps))


def _serl(sc: SerlConfig, ctx: CreditContext):
    """SERL: C = A ((1 - lam) + lam w) on action tokens, w = clip(exp(clip(sign(A) Delta,
    -20, 20)), 1 - clip, 1 + clip), Delta = log pi_T - log pi_theta; the teacher is the
    method state's copy of the policy."""
    decay = (fj.scale_steps(sc.decay_steps, sc.train_steps)
             if sc.scale_schedules and sc.decay_steps else sc.decay_steps)

    def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
        g = adv.episode_returns(batch.rewards, batch.turn_mask)
        a = adv.grpo_advantages(g, ctx.group_size)
        lam = fj.serl_lambda(step + 1, sc.lam0, decay)
        teacher_params = _join_like(mstate["teacher"], params)
        run = any_over_seeds(lam > 0, ctx)          # lam = 0: pure GRPO, no teacher pass
        teacher = jax.lax.cond(run, lambda: teacher_log_probs(ctx, teacher_params, batch,
                                                                   sc.teacher_prompt),
                               lambda: batch.logp_old)
        delta = fj.hindsight_delta(teacher, batch.logp_old, batch.token_mask)
        coef = fj.serl_coefficients(a, delta, action_tokens(batch), batch.token_mask, lam,
                                    sc.clip)
        return Credit(coef=coef, value_targets=value_targets_mc(batch),
                      metrics={"aux_tokens": jnp.float32(0.0), "env_calls": jnp.float32(0.0),
                               "serl/lambda": jnp.asarray(lam, jnp.float32)})
    return credit


def _trainable(params):
    """The trained part of join_params-form parameters (LoRA: the adapters)."""
    return params[0] if isinstance(params, tuple) else params


def _join_like(trained, params):
    return (trained,) + tuple(params[1:]) if isinstance(params, tuple) else trained


def _serl_init(sc: SerlConfig, ctx: CreditContext, params, key):
    """SERL's state: the teacher, a copy of the initial policy."""
    return {"teacher": jax.tree.map(jnp.copy, _trainable(params))}


def _serl_update(sc: SerlConfig, ctx: CreditContext, mstate, inputs):
    """Re-sync the teacher to the student after every `resync_every`-th step."""
    every = (fj.scale_steps(sc.resync_every, sc.train_steps) if sc.scale_schedules
             else sc.resync_every)
    sync = (inputs.step + 1) % every == 0
    new = _trainable(inputs.params)
    teacher = jax.tree.map(lambda n, o: jnp.where(sync, n, o), new, mstate["teacher"])
    return {"teacher": teacher}, {"serl_resync": sync.astype(jnp.float32)}


SERL = Method("serl", _serl, make_config=serl_config, init_state=_serl_init,
              update_state=_serl_update)
GRPO_EXTENDED = dataclasses.replace(GRPO, name="grpo_extended")
METHODS = (SERL, GRPO_EXTENDED)
