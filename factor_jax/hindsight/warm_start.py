"""The hindsight-reading phase of the warm start (warm_start.phase "feedback" or
"counterfactual"): what an
instruct model brings to FACTOR's and SERL's teachers, taught to the tiny actor after SFT.
The project's stand-in for a pretrained model's reading of the feedback (docs/methods.md,
FACTOR > HTA; measured in docs/results/regime.md).

The teacher's prompt is the policy's own input in SERL's teacher prompt (x_t, "Immediate
feedback from the current step:", o_{t+1}, "Correctly solve the current task.":
factor_jax.hindsight.teacher_prompt.teacher_prefix, the function FACTOR's credit calls).
On every turn of the noisy-expert episodes (expert and epsilon actions alike) three
supervised rows, summed in one loss (`hindsight_loss`: -log pi(target), or -log(1 - pi(y)) away):

  real:     [x_t | o_{t+1}]   -> y_t if the step made progress, else a*_t (the expert's
            pick at x_t): keep what the feedback shows worked, move off what did not;
  failure:  [x_t | "Nothing happens."] (the environment's answer to an action it cannot
            parse, `failure_feedback`) -> off y_t: a*_t where a*_t != y_t, else away from
            y_t (-log(1 - pi(y_t))). For a progress step this is the same (x_t, y_t) with
            the opposite target, so only the feedback tells them apart;
  student:  [x_t] (the actor's own prompt) -> the SFT actor's own distribution over the
            candidates (KL to it, computed once before the phase), so the student stays
            the SFT actor (not a longer SFT).

"counterfactual" adds a fourth row where the feedback alone decides the target at the
same x_t (factor_jax.hindsight.counterfactual): [x_t | o_c] -> c if the candidate c,
stepped from the stored state, made progress, else away from c.

Progress (`step_progress`, factor_jax.hindsight.progress) comes from the environment, not the
text: the step is as good as the scripted expert's own.

The generating actor (actor.chooser "generate", factor_jax.hindsight.generate): the same
rows on its own prompt p_t (the teacher's prefix is FACTOR's teacher's in generate mode);
the targets are the candidates' canonical responses "<think> </think> <action> c
</action> EOS" (what its SFT teaches), toward c their token log-likelihood, away from c
-log(1 - pi(c)) on c's action tokens, the student row the full-vocabulary KL to the SFT
actor along the taken turn's canonical response.

One jitted update (`make_hindsight_update`), compiled once: warm_start.phase_steps
Adam steps on warm_start.batch turns drawn from the live turns with a legal target.

Shapes: B episodes, T turns, M = B T flat turns, N sampled turns, O / F / A / K the
observation, feedback, action and candidate lengths (for a generating actor O is its
prompt's P and A the canonical response's R').
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import chex
import jax
import jax.numpy as jnp
import optax

from asct_jax.infra.checks import ConfigError, check
from asct_jax.rl.actor import generation_spec
from asct_jax.rl.generation import canonical_response
from asct_jax.rl.train_step import join_params
from asct_jax.rl.types import Rollout, merge_batch_turns
from factor_jax.hindsight import counterfactual as cf
from factor_jax.hindsight import generate as gen
from factor_jax.hindsight.progress import (  # noqa: F401  (re-export)
    _fresh_turns, expert_finish, failure_feedback, scripted, step_progress)
from factor_jax.hindsight.teacher_prompt import teacher_prefix

# warm_start.phase (a field of the substrate's warm_start section, read here): "none",
# or "feedback": the teacher prompt taught to read the feedback after SFT (this module);
# "counterfactual": "feedback" plus rows where each stepped candidate's own feedback
# decides its target (factor_jax.hindsight.counterfactual).
HINDSIGHT = ("none", "feedback", "counterfactual")
TEACHER_PROMPT = "serl"            # the prompt taught: FACTOR's and SERL's default


@chex.dataclass(frozen=True)
class HindsightTurns:
    """The phase's data, flat over the M = B T turns of the noisy-expert episodes.

    obs [M, O], feedback [M, F] (o_{t+1}), failure [M, F] ("Nothing happens."),
    cands [M, K, A], legal [M, K]; taken [M] i32 (y_t's index), expert [M] i32 (a*_t's),
    progress [M] bool (step_progress), live [M] bool (the turn happened and a*_t is legal),
    student_logp [M, K]: the SFT actor's log pi(a_k | x_t) (0 until `with_student`).
    A generating actor's: obs [M, P] its prompts, cands [M, K, R'] the canonical
    responses, student_logp [M, R', V] the SFT actor's next-token log-probs along the
    taken one (hindsight_generate).
    Counterfactual ("counterfactual"; C = 0 otherwise): cf_index [M, C] i32, cf_valid
    [M, C], cf_feedback [M, C, F], cf_progress [M, C] (hindsight_counterfactual).
    """

    obs: chex.Array
    feedback: chex.Array
    failure: chex.Array
    cands: chex.Array
    legal: chex.Array
    taken: chex.Array
    expert: chex.Array
    progress: chex.Array
    live: chex.Array
    student_logp: chex.Array
    cf_index: chex.Array
    cf_valid: chex.Array
    cf_feedback: chex.Array
    cf_progress: chex.Array


def hindsight_turns(env, env_params, data: Rollout, key, teacher: str = "expert",
                    counterfactual: int = 0, spec=None, pad_id: int = 0) -> HindsightTurns:
    """The phase's data from the noisy-expert episodes `data` [B, T], with
    `counterfactual` (C) candidates stepped per turn (0: none). A generating actor's
    episodes (data.prompts; spec its GenerationSpec, pad_id its PAD): the environment
    steps the taken candidate's tokens, the candidates become their canonical responses.
    Jittable (env, teacher, counterfactual, spec, pad_id static)."""
    if data.prompts is not None:
        turns = hindsight_turns(env, env_params, data.replace(
            obs=data.prompts, prompts=None,
            responses=gen.env_responses(data.cand_tokens, data.action_index)),
            key, teacher, counterfactual)
        return turns.replace(cands=canonical_response(turns.cands, spec, pad_id))
    flat = lambda x: merge_batch_turns(x)  # noqa: E731
    states = jax.tree.map(flat, data.states)
    m = data.turn_mask.size
    keys = jax.random.split(key, m)
    progress, _ = jax.vmap(lambda s, y, k: step_progress(env, env_params, s, y, k, teacher))(
        states, flat(data.responses), keys)
    failure = jax.vmap(lambda s: failure_feedback(env, env_params, s))(states)
    policy = scripted(env, teacher)
    expert = jax.vmap(lambda s, k: policy(s, env_params, k))(
        states, jax.random.split(jax.random.fold_in(key, 1), m)).astype(jnp.int32)
    legal = flat(data.cand_mask)
    expert_legal = jnp.take_along_axis(legal, expert[:, None], axis=1)[:, 0]
    cands = flat(data.cand_tokens)
    if counterfactual:
        cfs = cf.counterfactual_fields(env, env_params, states, cands, legal, expert,
                                       jax.random.fold_in(key, 2), teacher, counterfactual)
    else:
        fb = flat(data.feedback)
        cfs = dict(cf_index=jnp.zeros((m, 0), jnp.int32), cf_valid=jnp.zeros((m, 0), bool),
                   cf_feedback=jnp.zeros((m, 0) + fb.shape[1:], fb.dtype),
                   cf_progress=jnp.zeros((m, 0), bool))
    return HindsightTurns(
        obs=flat(data.obs), feedback=flat(data.feedback), failure=failure,
        cands=cands, legal=legal, taken=flat(data.action_index),
        expert=expert, progress=progress & flat(data.turn_mask),
        live=flat(data.turn_mask) & expert_legal & (flat(data.action_index) >= 0),
        student_logp=jnp.zeros(legal.shape, jnp.float32), **cfs)


def with_student(policy, params, turns: HindsightTurns) -> HindsightTurns:
    """turns with student_logp [M, K] = the actor's (params') log pi(a_k | x_t) over the
    legal candidates (-inf elsewhere); a generating actor's [M, R', V] along the taken
    canonical response (hindsight_generate.student_distributions). Jittable (policy
    static)."""
    if generation_spec(policy) is not None:
        return turns.replace(student_logp=gen.student_distributions(
            policy, params, turns.obs, gen.taken_responses(turns.cands, turns.taken)))
    cand_logp, _, _ = policy.candidate_log_probs(params, turns.obs, turns.cands, turns.legal)
    return turns.replace(student_logp=jnp.where(turns.legal, cand_logp, -jnp.inf))


def targets(turns: HindsightTurns) -> Dict[str, Tuple[chex.Array, chex.Array]]:
    """{row: (candidate index [M] i32, away [M] bool)}: the action each teacher row's
    prompt is taught (away False: made likelier) or taught away from (away True: made less
    likely). real: y_t if the step made progress, else a*_t; failure: a*_t where
    a*_t != y_t, else away from y_t."""
    differ = turns.expert != turns.taken
    return {"real": (jnp.where(turns.progress, turns.taken, turns.expert),
                     jnp.zeros_like(differ)),
            "failure": (jnp.where(differ, turns.expert, turns.taken), ~differ)}


def sample(key, turns: HindsightTurns, batch: int) -> Dict[str, chex.Array]:
    """`batch` live turns drawn with replacement: the prompts' inputs, each teacher row's
    target action tokens [N, A] and away flags [N], the SFT actor's student_logp [N, K];
    with counterfactual candidates (C > 0) one of them per turn (cf_feedback [N, F],
    counterfactual_action / _away; its draw keyed apart, so C = 0 draws as before)."""
    w = turns.live.astype(jnp.float32)
    idx = jax.random.choice(key, w.shape[0], (batch,), p=w / jnp.maximum(jnp.sum(w), 1e-9))
    cands = turns.cands[idx]
    out = dict(obs=turns.obs[idx], feedback=turns.feedback[idx], failure=turns.failure[idx],
               cands=cands, legal=turns.legal[idx], student_logp=turns.student_logp[idx],
               taken=turns.taken[idx])
    for row, (i, away) in targets(turns).items():
        out[f"{row}_action"] = jnp.take_along_axis(cands, i[idx][:, None, None], axis=1)[:, 0]
        out[f"{row}_away"] = away[idx]
    if turns.cf_index.shape[1]:
        out.update(cf.sample_counterfactual(jax.random.fold_in(key, 1), idx, turns.cf_index,
                                            turns.cf_valid, turns.cf_feedback,
                                            turns.cf_progress, turns.cands))
    return out


def prompts(policy, mb: Dict[str, chex.Array]) -> Dict[str, chex.Array]:
    """{row: prompt [N, .]}: the teacher's prompt (teacher_prefix, the credit's own) with
    the real, the failure and (if sampled) the counterfactual candidate's feedback, and
    the student's own input."""
    out = {"real": teacher_prefix(policy, mb["obs"], mb["feedback"], TEACHER_PROMPT),
           "failure": teacher_prefix(policy, mb["obs"], mb["failure"], TEACHER_PROMPT),
           "student": mb["obs"]}
    if "cf_feedback" in mb:
        out["counterfactual"] = teacher_prefix(policy, mb["obs"], mb["cf_feedback"],
                                               TEACHER_PROMPT)
    return out


def _row_loss(logp, action, away, pad_id) -> chex.Array:
    """Mean over rows of -log pi(y) (toward y) or -log(1 - pi(y)) (away from y), with
    log pi(y) = sum_j logp [N, A] over y's real tokens."""
    lp = jnp.minimum(jnp.sum(jnp.where(action != pad_id, logp, 0.0), -1), -1e-6)
    return jnp.mean(jnp.where(away, -jnp.log(-jnp.expm1(lp)), -lp))


def hindsight_loss(policy, params, mb: Dict[str, chex.Array]
                   ) -> Tuple[chex.Array, Dict[str, chex.Array]]:
    """The rows' losses summed (module docstring); (loss, parts). The teacher's rows
    score through policy.token_log_probs (the teacher's pass); the student's is
    KL(pi_SFT || pi) over the candidates (policy.candidate_log_probs, the actor's). A
    generating actor's: hindsight_generate's response_loss and student_kl."""
    rows = prompts(policy, mb)
    parts = {}
    if generation_spec(policy) is not None:
        for row in [r for r in ("real", "failure", "counterfactual") if r in rows]:
            parts[row] = gen.response_loss(policy, params, rows[row], mb[f"{row}_action"],
                                           mb[f"{row}_away"])
        parts["student"] = gen.student_kl(policy, params, rows["student"],
                                          gen.taken_responses(mb["cands"], mb["taken"]),
                                          mb["student_logp"])
        return sum(parts.values()), parts
    for row in [r for r in ("real", "failure", "counterfactual") if r in rows]:
        action = mb[f"{row}_action"]
        logp = policy.token_log_probs(params, rows[row], action, mb["cands"], mb["legal"])
        parts[row] = _row_loss(logp, action, mb[f"{row}_away"], policy.pad_id)
    cand_logp, _, _ = policy.candidate_log_probs(params, rows["student"], mb["cands"],
                                                 mb["legal"])
    sft = mb["student_logp"]
    kl = jnp.where(mb["legal"], jnp.exp(sft) * (sft - cand_logp), 0.0)
    parts["student"] = jnp.mean(jnp.sum(kl, -1))
    return sum(parts.values()), parts


def make_hindsight_update(policy, optimizer: optax.GradientTransformation) -> Callable:
    """Jitted update(params, opt_state, turns, key, batch, frozen) -> (params, opt_state,
    loss, parts): one Adam step on hindsight_loss of `batch` sampled turns (batch static;
    frozen: the LoRA base or None)."""
    def update(params, opt_state, turns, key, batch, frozen=None):
        mb = sample(key, turns, batch)
        (loss, parts), grads = jax.value_and_grad(
            lambda p: hindsight_loss(policy, join_params(p, frozen), mb), has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, parts
    return jax.jit(update, static_argnames=("batch",))


def hindsight_phase(run, policy, params, data: Rollout, env, env_params, key,
                    frozen: Any = None) -> Tuple[Any, Dict[str, float]]:
    """warm_start.phase "feedback" / "counterfactual": warm_start.phase_steps
    updates of hindsight_loss on the noisy-expert episodes `data`; "none": params
    unchanged, no info. Returns (params, info: the first / last losses, the progress
    fractions)."""
    ws = run.warm_start
    check("warm_start.phase", ws.phase, HINDSIGHT)
    if ws.phase == "none":
        return params, {}
    spec = generation_spec(policy)
    if (data.prompts is not None) != (spec is not None):
        written = "generated" if spec is None else "candidate"
        raise ConfigError("warm_start.phase", f"{ws.phase!r} with a "
                          f"{type(policy).__name__} on {written} episodes",
                          "the episodes of the actor's own chooser, or 'none'")
    if spec is not None:
        gen.check_response_len(spec, env.action_len, ws.phase)
    num = cf.CANDIDATES if ws.phase == "counterfactual" else 0
    turns = jax.jit(hindsight_turns, static_argnums=(0, 4, 5, 6, 7))(
        env, env_params, data, jax.random.fold_in(key, 0), ws.imitated, num, spec,
        policy.pad_id)
    turns = jax.jit(with_student, static_argnums=0)(policy, join_params(params, frozen),
                                                    turns)
    adam = optax.adam(ws.lr)
    update = make_hindsight_update(policy, adam)
    opt_state = adam.init(params)
    first = last = None
    for i in range(ws.phase_steps):
        params, opt_state, loss, parts = update(params, opt_state, turns,
                                                jax.random.fold_in(key, i + 1),
                                                batch=ws.batch, frozen=frozen)
        if i == 0:
            first = {k: float(v) for k, v in parts.items()}
        if i == ws.phase_steps - 1:
            last = {k: float(v) for k, v in parts.items()}
    live = turns.live
    info = {"hindsight_progress_fraction": float(jnp.sum(turns.progress & live)
                                                 / jnp.maximum(jnp.sum(live), 1)),
            "hindsight_offexpert_progress_fraction": float(
                jnp.sum(turns.progress & live & (turns.taken != turns.expert))
                / jnp.maximum(jnp.sum(live & (turns.taken != turns.expert)), 1))}
    if num:   # the counterfactual candidates other than a*_t (slots 1..C-1)
        other = turns.cf_valid[:, 1:] & live[:, None]
        info["hindsight_counterfactual_progress_fraction"] = float(
            jnp.sum(turns.cf_progress[:, 1:] & other) / jnp.maximum(jnp.sum(other), 1))
    for name, parts in (("first", first), ("last", last)):
        for k, v in (parts or {}).items():
            info[f"hindsight_{k}_loss_{name}"] = v
    return params, info
