"""The hindsight-reading phase of the warm start (warm_start.hindsight "feedback"): what an
instruct model brings to FACTOR's and SERL's teachers, taught to the tiny actor after SFT.
The project's stand-in for a pretrained model's reading of the feedback (docs/methods.md,
FACTOR > HTA; measured in docs/results/regime.md).

The teacher's prompt is the policy's own input in SERL's teacher prompt (x_t, "Immediate
feedback from the current step:", o_{t+1}, "Correctly solve the current task.":
asct_jax.rl.teacher_prompt.teacher_prefix, the function FACTOR's credit calls). On every
turn of the noisy-expert episodes (expert and epsilon actions alike) three supervised
rows, summed in one loss (`hindsight_loss`: -log pi(target), or -log(1 - pi(y)) away):

  real:     [x_t | o_{t+1}]   -> y_t if the step made progress, else a*_t (the expert's
            pick at x_t): keep what the feedback shows worked, move off what did not;
  failure:  [x_t | "Nothing happens."] (the environment's answer to an action it cannot
            parse, `failure_feedback`) -> off y_t: a*_t where a*_t != y_t, else away from
            y_t (-log(1 - pi(y_t))). For a progress step this is the same (x_t, y_t) with
            the opposite target, so only the feedback tells them apart;
  student:  [x_t] (the actor's own prompt) -> the SFT actor's own distribution over the
            candidates (KL to it, computed once before the phase), so the student stays
            the SFT actor (not a longer SFT).

Progress (`step_progress`) comes from the environment, not the text: the step is as good
as the scripted expert's own, i.e. played on from s_{t+1} the expert ends no worse,
r_t + G*(s_{t+1}) >= G*(s_t), and no later, d*(s_{t+1}) + 1 <= d*(s_t) (G*, d*: the
expert's return and turns from a state, its turn counter reset; `expert_finish`). So an
epsilon step as good as the expert's (shop: the right option in another order; science: a
milestone out of the plan's order) is progress; a detour, a wrong object or a ruin is not.
Household's privileged expert walks straight to the hidden target: there almost only its
own step is progress.

One jitted update (`make_hindsight_update`), compiled once: warm_start.hindsight_steps
Adam steps on warm_start.batch turns drawn from the live turns with a legal target.

Shapes: B episodes, T turns, M = B T flat turns, N sampled turns, O / F / A / K the
observation, feedback, action and candidate lengths.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import chex
import jax
import jax.numpy as jnp
import optax

from asct_jax.envs.base import PAD_ID
from asct_jax.envs.play import Choice, StateActor, play_from
from asct_jax.infra.checks import ConfigError
from asct_jax.rl.run_config import HINDSIGHT  # noqa: F401  (re-export)
from asct_jax.rl.teacher_prompt import teacher_prefix
from asct_jax.rl.train_step import join_params
from asct_jax.rl.types import Rollout, merge_batch_turns

TEACHER_PROMPT = "serl"            # the prompt taught: FACTOR's and SERL's default


@chex.dataclass(frozen=True)
class HindsightTurns:
    """The phase's data, flat over the M = B T turns of the noisy-expert episodes.

    obs [M, O], feedback [M, F] (o_{t+1}), failure [M, F] ("Nothing happens."),
    cands [M, K, A], legal [M, K]; taken [M] i32 (y_t's index), expert [M] i32 (a*_t's),
    progress [M] bool (step_progress), live [M] bool (the turn happened and a*_t is legal),
    student_logp [M, K]: the SFT actor's log pi(a_k | x_t) (0 until `with_student`).
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


def scripted(env, teacher: str = "expert") -> Callable:
    """The scripted policy (state, params, key) -> [] i32 the warm start imitates."""
    return env.expert_policy if teacher == "expert" else env.scripted_policy(teacher)


def _fresh_turns(state):
    """The state with its turn counter at 0 (the expert gets the whole turn budget)."""
    return state.replace(turn=jnp.zeros_like(state.turn))


def expert_finish(env, env_params, state, key, teacher: str = "expert"
                  ) -> Tuple[chex.Array, chex.Array]:
    """(G* [], d* [] i32): the scripted expert's return and turns played on from ONE
    state (its turn counter reset; at most env.max_turns turns; 0, 0 if it is done)."""
    policy = scripted(env, teacher)

    def act(s, k, carry):
        cands, legal = env.legal_actions(s, env_params)
        a = policy(s, env_params, k)
        a = jnp.where(legal[a], a, jnp.argmax(legal)).astype(jnp.int32)  # off its path
        return Choice(response=cands[a], index=a, penalty=jnp.float32(0.0),
                      tokens=jnp.float32(0.0)), carry

    played = play_from(env, env_params, StateActor(init=lambda s: (), act=act),
                       _fresh_turns(state), key, env.max_turns)
    return played.ret, played.calls


def failure_feedback(env, env_params, state) -> chex.Array:
    """[F]: the environment's feedback to an action it cannot parse at ONE state (all PAD
    tokens sent): its "Nothing happens."."""
    pad = jnp.full((env.action_len,), PAD_ID, jnp.int32)
    return env.step(_fresh_turns(state), pad, env_params)[1].feedback


def step_progress(env, env_params, state, response, key, teacher: str = "expert"
                  ) -> Tuple[chex.Array, chex.Array]:
    """(progress [] bool, feedback [F]) of `response` [A] at ONE stored state: the step
    replayed (the state carries its randomness: the recorded transition) and
    progress = r + G*(s') >= G*(s) - 1e-6 and (s' done or d*(s') + 1 <= d*(s))."""
    s0 = _fresh_turns(state)
    s1, ts = env.step(s0, response, env_params)
    k0, k1 = jax.random.split(key)
    g0, d0 = expert_finish(env, env_params, s0, k0, teacher)
    g1, d1 = expert_finish(env, env_params, s1, k1, teacher)
    no_worse = ts.reward + g1 >= g0 - 1e-6
    return no_worse & (ts.done | (d1 + 1 <= d0)), ts.feedback


def hindsight_turns(env, env_params, data: Rollout, key, teacher: str = "expert"
                    ) -> HindsightTurns:
    """The phase's data from the noisy-expert episodes `data` [B, T] (candidates actor).
    Jittable (env, teacher static)."""
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
    return HindsightTurns(
        obs=flat(data.obs), feedback=flat(data.feedback), failure=failure,
        cands=flat(data.cand_tokens), legal=legal, taken=flat(data.action_index),
        expert=expert, progress=progress & flat(data.turn_mask),
        live=flat(data.turn_mask) & expert_legal & (flat(data.action_index) >= 0),
        student_logp=jnp.zeros(legal.shape, jnp.float32))


def with_student(policy, params, turns: HindsightTurns) -> HindsightTurns:
    """turns with student_logp [M, K] = the actor's (params') log pi(a_k | x_t) over the
    legal candidates (-inf elsewhere). Jittable (policy static)."""
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
    target action tokens [N, A] and away flags [N], the SFT actor's student_logp [N, K]."""
    w = turns.live.astype(jnp.float32)
    idx = jax.random.choice(key, w.shape[0], (batch,), p=w / jnp.maximum(jnp.sum(w), 1e-9))
    cands = turns.cands[idx]
    out = dict(obs=turns.obs[idx], feedback=turns.feedback[idx], failure=turns.failure[idx],
               cands=cands, legal=turns.legal[idx], student_logp=turns.student_logp[idx])
    for row, (i, away) in targets(turns).items():
        out[f"{row}_action"] = jnp.take_along_axis(cands, i[idx][:, None, None], axis=1)[:, 0]
        out[f"{row}_away"] = away[idx]
    return out


def prompts(policy, mb: Dict[str, chex.Array]) -> Dict[str, chex.Array]:
    """{row: prompt [N, .]}: the teacher's prompt (teacher_prefix, the credit's own) with
    the real and with the failure feedback, and the student's own input."""
    return {"real": teacher_prefix(policy, mb["obs"], mb["feedback"], TEACHER_PROMPT),
            "failure": teacher_prefix(policy, mb["obs"], mb["failure"], TEACHER_PROMPT),
            "student": mb["obs"]}


def _row_loss(logp, action, away, pad_id) -> chex.Array:
    """Mean over rows of -log pi(y) (toward y) or -log(1 - pi(y)) (away from y), with
    log pi(y) = sum_j logp [N, A] over y's real tokens."""
    lp = jnp.minimum(jnp.sum(jnp.where(action != pad_id, logp, 0.0), -1), -1e-6)
    return jnp.mean(jnp.where(away, -jnp.log(-jnp.expm1(lp)), -lp))


def hindsight_loss(policy, params, mb: Dict[str, chex.Array]
                   ) -> Tuple[chex.Array, Dict[str, chex.Array]]:
    """The three rows' losses summed (module docstring); (loss, parts). The teacher's rows
    score through policy.token_log_probs (the teacher's pass); the student's is
    KL(pi_SFT || pi) over the candidates (policy.candidate_log_probs, the actor's)."""
    rows = prompts(policy, mb)
    parts = {}
    for row in ("real", "failure"):
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
    """warm_start.hindsight "feedback": warm_start.hindsight_steps updates of
    hindsight_loss on the noisy-expert episodes `data`; "none": params unchanged, no
    info. Returns (params, info: the first / last losses, the progress fraction)."""
    ws = run.warm_start
    if ws.hindsight == "none":
        return params, {}
    if data.prompts is not None:
        raise ConfigError("warm_start.hindsight", f"{ws.hindsight!r} with actor.chooser "
                          f"{run.actor.chooser!r}", "'none' for a generating actor "
                          "(the phase is written for the candidates actor)")
    turns = jax.jit(hindsight_turns, static_argnums=(0, 4))(env, env_params, data,
                                                            jax.random.fold_in(key, 0),
                                                            ws.teacher)
    turns = jax.jit(with_student, static_argnums=0)(policy, join_params(params, frozen),
                                                    turns)
    adam = optax.adam(ws.lr)
    update = make_hindsight_update(policy, adam)
    opt_state = adam.init(params)
    first = last = None
    for i in range(ws.hindsight_steps):
        params, opt_state, loss, parts = update(params, opt_state, turns,
                                                jax.random.fold_in(key, i + 1),
                                                batch=ws.batch, frozen=frozen)
        if i == 0:
            first = {k: float(v) for k, v in parts.items()}
        if i == ws.hindsight_steps - 1:
            last = {k: float(v) for k, v in parts.items()}
    live = turns.live
    info = {"hindsight_progress_fraction": float(jnp.sum(turns.progress & live)
                                                 / jnp.maximum(jnp.sum(live), 1)),
            "hindsight_offexpert_progress_fraction": float(
                jnp.sum(turns.progress & live & (turns.taken != turns.expert))
                / jnp.maximum(jnp.sum(live & (turns.taken != turns.expert)), 1))}
    for name, parts in (("first", first), ("last", last)):
        for k, v in (parts or {}).items():
            info[f"hindsight_{k}_loss_{name}"] = v
    return params, info
