"""FACTOR and its ablations as credit methods (`Method` records, see asct_jax.rl.credit;
docs/methods.md, FACTOR), as the authors' code defines them (Super-MariOvO/FACTOR). Its
baselines SERL and grpo_extended are in factor_jax.baselines, ASCT + FACTOR in
factor_jax.asct_factor.

FACTOR at step k (1-indexed; the train step's counter is k - 1):
  rewards    per benchmark (factor_jax.reward_construction, the env's rule in OUTCOME_RULES):
             terminal reward, A_seq and V~(x_0) = b of every trajectory;
  critic     checkpoints (one per half) -> M continuations of pi_old of <= horizon turns
             -> Monte-Carlo targets into a replay of the last W steps -> one Adam step of
             a separate head on stop-gradient features -> Polyak target head
             (factor_jax.critic; the method state);
  how much   k <= warm-up: A*_t = A_seq / T; after: A*_t = r_t + V~(x_{t+1}) - V~(x_t)
             with the target head, r_t the env's reward but the last turn's, which is
             the terminal reward (TAC; factor.step_rewards "zero": r_t = 0 before it);
  where      s = sign(A*) clip(Delta, -d, d) (factor_jax.hta_scores),
             omega = L (1 - eta_k) / L + L eta_k softmax(s / tau) (factor_jax.apm_weights),
             eta_k active for k in [start, end];
  loss       L_act (action-mean surrogate on C = A* omega) + L_nonact (token-mean on A_seq)
             + lambda_k * token-mean forward KL(teacher || policy) on action tokens.
factor.critic_start "prefit" (this project's option, not the authors'): no warm-up; the
critic is fitted before step 1 on rollouts of the initial policy
(factor_jax.critic_replay.fit_critic_first), TAC's credit and the teacher act from k = 1
(Schedule.from_step_one).
The step constants (warm-up 10, eta 11..49 / 50, lambda 50, Polyak 0.995)
are given for 150-step runs and scale with train.steps (factor.scale_schedules), but for
the warm-up: its 10 critic steps are kept whatever train.steps is, and eta's window moves
with its end (factor.warmup_scaling "keep"; "scale" scales it too, the earlier).

factor_no_tac  A_t = A_seq / T_i (the authors' credit without a critic) -> HTA + APM
factor_no_hta  TAC -> omega = 1
factor_no_apm  TAC -> the softmax alone (weights sum to 1: credit shrunk by 1/L_t)

The hindsight teacher of FACTOR is pi_old (the behaviour parameters, frozen for the
update) reading [x_t | SEP o_{t+1} | y_t]. Every continuation step is counted in
metrics["env_calls"] and its action tokens in metrics["aux_tokens"].
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import chex
import jax
import jax.numpy as jnp

import factor_jax as fj
from asct_jax.infra.checks import Range
from asct_jax.infra.typed_config import from_section, option
from asct_jax.rl.credit import CreditContext, Method, installs_credit_state, value_targets_mc
from asct_jax.rl.types import Credit, Rollout, action_tokens, nonaction_tokens
from asct_jax.rl.protocol import Protocol
from factor_jax import critic as tac_critic
from factor_jax.critic_replay import (episode_outcomes, fit_critic_first, replay_targets,
                                     run_outcome_rule)
from factor_jax.host_continuations import continue_on_host
from factor_jax.teacher import TEACHER_DIST, TEACHER_PROMPTS, kl_reduce, teacher_outputs

# FACTOR's protocol (Super-MariOvO/FACTOR, factor/training/trainer.py and config.py): one
# Adam step on the whole batch per training step (so the ratio is 1 and the clip never
# acts), lr 5e-7 against its baselines' 1e-6 (lr_scale 0.5), grad clip 1.0, no entropy
# bonus, no value loss into the backbone (TAC's head has its own Adam), no reference KL
# (its own lambda_k teacher KL is the method's loss); L_act action-mean (the method's
# policy loss). asct_jax.rl.protocol: the type and how a config's ppo section resolves it.
FACTOR_PROTOCOL = Protocol(
    epochs=1, minibatches=1, minibatch_size=0, minibatch_unit="episodes", clip_eps=0.2,
    dual_clip=0.0, lr_scale=0.5, warmup_steps=0, max_grad_norm=1.0, weight_decay=0.0,
    vf_coef=0.0, ent_coef=0.0, kl_coef=0.0, kl_clamp=0.0, aggregation="action_mean",
    standardise="none", questions="sampled", term_grad_norms=False)

REWARD_RULES = ("auto",) + fj.REWARD_RULES  # factor.reward_rule; auto: the env's own
OUTCOMES = ("auto", "success", "score", "return")  # factor.outcome: what G is
WARMUP_SCALINGS = ("keep", "scale")  # factor.warmup_scaling: the critic's warm-up count
# factor.critic_start: "warmup" (the authors') warms TAC's critic up in the run's first
# warmup_steps steps; "prefit" (this project's) fits it before step 1 (fit_critic_first).
CRITIC_STARTS = ("warmup", "prefit")


@dataclasses.dataclass(frozen=True)
class FactorConfig:
    """FACTOR's fields (section factor); defaults are the authors' (experiments/configs/
    base.py). train_steps comes from train.steps (for the schedules)."""

    reward_rule: str = option(REWARD_RULES, "reward construction; auto: the analogue's")
    outcome: str = option(OUTCOMES, "the episode outcome G; auto: the analogue's")
    continuations: int = option(Range(1, None, integer=True), "M continuations per checkpoint")
    horizon: int = option(Range(1, None, integer=True), "max turns of a continuation")
    critic_width: int = option(Range(1, None, integer=True), "hidden width of the critic head")
    critic_lr: float = option(Range(0.0, None, lo_open=True), "Adam lr of the critic")
    critic_polyak: float = option(Range(0.0, 1.0, hi_open=True), "Polyak decay at 150 steps")
    replay_steps: int = option(Range(1, None, integer=True), "steps of targets pooled")
    replay_per_step: int = option(Range(1, None, integer=True), "targets stored per step")
    critic_sample: int = option(Range(1, None, integer=True), "targets per critic step")
    warmup_steps: int = option(Range(0, None, integer=True), "critic-only steps (credit A_seq/T)")
    eta0: float = option(Range(0.0, 1.0), "HTA mixing weight eta_0")
    eta_start: int = option(Range(1, None, integer=True), "first step with eta > 0")
    eta_end: int = option(Range(1, None, integer=True), "last step with eta > 0")
    eta_decay: int = option(Range(1, None, integer=True), "eta_k = eta_0 max(1 - k/decay, 0)")
    tau: float = option(Range(0.0, None, lo_open=True), "softmax temperature")
    clip_d: float = option(Range(0.0, None, lo_open=True), "Delta clipped to [-d, d]")
    kl_coef: float = option(Range(0.0, None), "weight of lambda_k KL (1: the authors')")
    kl_decay: int = option(Range(1, None, integer=True), "lambda_k = max(1 - k/decay, 0)")
    scale_schedules: bool = option((True, False), "scale the step constants to train.steps")
    train_steps: int = option(None, "train.steps (passed in, not a field of the section)")
    step_rewards: str = option(("auto",) + fj.STEP_REWARDS, "TAC's r_t before the last "
                               "turn: the env's (keep, the authors') or 0 (zero, the "
                               "earlier); auto: keep, zero where G is the return (it holds "
                               "them already)", default="auto")
    teacher_prompt: str = option(TEACHER_PROMPTS, "the teacher's prompt: serl (SERL's "
                                 "wording) or appended (the earlier one)", default="serl")
    warmup_scaling: str = option(WARMUP_SCALINGS, "under scale_schedules, the critic's "
                                 "warm-up: keep its count (the authors' critic steps "
                                 "before TAC's credit; eta's window moves after it) or "
                                 "scale it with the run (the earlier)", default="keep")
    critic_steps: int = option(Range(1, None, integer=True), "critic steps (Adam, then "
                               "Polyak) per training step; 1: the authors'", default=1)
    critic_start: str = option(CRITIC_STARTS, "how TAC's critic starts: warmup (the "
                               "authors': critic-only warm-up steps, credit A_seq / T) or "
                               "prefit (ours: fitted before step 1, TAC's credit from step "
                               "1)", default="warmup")
    prefit_batches: int = option(Range(1, None, integer=True), "under prefit: rollout "
                                 "batches of the initial policy whose targets fill the "
                                 "replay", default=4)
    prefit_critic_steps: int = option(Range(1, None, integer=True), "under prefit: "
                                      "critic-only Adam steps on them", default=100)


def factor_config(config) -> FactorConfig:
    """FactorConfig of config.factor (ConfigError naming factor.<field> on a bad value)."""
    return from_section(FactorConfig, config, "factor", train_steps=int(config.train.steps))


@dataclasses.dataclass(frozen=True)
class Schedule:
    """FACTOR's step constants for this run (scaled from 150 steps, or as given); k is
    the 1-indexed step. Warm-up: k <= warmup. eta_k = eta0 max(1 - (k - eta_origin) /
    eta_decay, 0) for eta_start <= k <= eta_end (the scaled schedule, eta_origin steps
    later when the warm-up keeps its count). lambda_k = max(1 - k / kl_decay, 0)."""

    warmup: int
    eta_start: int
    eta_end: int
    eta_decay: int
    kl_decay: int
    polyak: float
    eta_origin: int = 0

    @staticmethod
    def of(fc: FactorConfig, critic: bool = True) -> "Schedule":
        """critic: whether the run warms TAC's critic up. False (asct_factor): no critic
        to wait for, so no warm-up; the teacher is on from step 1 and eta decays to 0
        over the authors' span of teacher steps after the warm-up (eta_end - warmup: 39
        of 150) scaled, at least 1 step: eta_k = eta0 max(1 - (k - 1) / D, 0), k <= D.
        factor.critic_start "prefit" (the critic fitted before step 1): the same schedule
        from step 1, with the critic's Polyak decay (scaled under scale_schedules)."""
        if not critic:      # scaled or not (from_step_one reads scale_schedules)
            return Schedule.from_step_one(fc, fc.critic_polyak)
        if fc.critic_start == "prefit":
            return Schedule.from_step_one(fc, Schedule.polyak_of(fc))
        if not fc.scale_schedules:
            return Schedule(fc.warmup_steps, fc.eta_start, fc.eta_end, fc.eta_decay,
                            fc.kl_decay, fc.critic_polyak)
        n = fc.train_steps
        scaled = fj.scale_steps(fc.warmup_steps, n) if fc.warmup_steps else 0
        # "keep": the critic gets the authors' count of steps before its credit is used
        # (a count of Adam steps on the head, not a share of the run); eta's window,
        # which starts after the warm-up, moves by as much.
        keep = fc.warmup_scaling == "keep"
        warmup = fc.warmup_steps if keep else scaled
        origin = warmup - scaled
        return Schedule(warmup=warmup,
                        eta_start=max(fj.scale_steps(fc.eta_start, n), scaled + 1) + origin,
                        eta_end=fj.scale_steps(fc.eta_end, n) + origin,
                        eta_decay=fj.scale_steps(fc.eta_decay, n),
                        kl_decay=fj.scale_steps(fc.kl_decay, n),
                        polyak=Schedule.polyak_of(fc), eta_origin=origin)

    @staticmethod
    def polyak_of(fc: FactorConfig) -> float:
        """The target head's Polyak decay: as given, or under scale_schedules with its
        time constant 1 / (1 - decay) in steps scaled to the run, in [0, the given]."""
        if not fc.scale_schedules:
            return fc.critic_polyak
        polyak = 1.0 - (1.0 - fc.critic_polyak) * fj.schedules.REFERENCE_STEPS / fc.train_steps
        return float(min(max(polyak, 0.0), fc.critic_polyak))

    @staticmethod
    def from_step_one(fc: FactorConfig, polyak: float) -> "Schedule":
        """No warm-up: the teacher on from step 1, eta_k = eta0 max(1 - (k - 1) / D, 0)
        for k <= D, D the authors' teacher steps after their warm-up (eta_end - warmup,
        at least 1; scaled under scale_schedules), lambda_k from step 1 as given."""
        scale = ((lambda x: fj.scale_steps(x, fc.train_steps)) if fc.scale_schedules
                 else (lambda x: x))
        span = scale(max(fc.eta_end - fc.warmup_steps, 1))
        return Schedule(warmup=0, eta_start=1, eta_end=span, eta_decay=span,
                        kl_decay=scale(fc.kl_decay), polyak=polyak, eta_origin=1)

    def eta(self, k, eta0: float) -> chex.Array:
        """[] float32 eta_k at the 1-indexed step k (int or traced scalar)."""
        o = self.eta_origin   # eta_k = eta0 max(1 - (k - o) / decay, 0), start <= k <= end
        return fj.eta_schedule(k - o, eta0, self.eta_start - o, self.eta_end - o,
                               self.eta_decay)


def step_rewards_of(fc: FactorConfig, outcome: str) -> str:
    """factor.step_rewards resolved: "auto" keeps the step rewards (the authors', whose G
    is a success or a score) unless G is the return, which already sums them."""
    if fc.step_rewards != "auto":
        return fc.step_rewards
    return "zero" if outcome == "return" else "keep"


def init_critic_state(fc: FactorConfig, ctx: CreditContext, params, key):
    """FACTOR's method state: a fresh TAC critic over the policy's feature width."""
    obs = jnp.zeros((1, ctx.policy.input_len), jnp.int32)
    hidden = jax.eval_shape(ctx.policy.features, params, obs).shape[-1]
    return tac_critic.init_critic(key, hidden, fc.critic_width, fc.replay_steps,
                                  fc.replay_per_step, fc.critic_lr)


@chex.dataclass(frozen=True)
class FactorPieces:
    """Everything a FACTOR credit computes for a batch (factor_pieces; Figure 5 reads it).

    Attributes:
      coef: [B, T, A] C_{t,j} = A*_t omega_{t,j}.
      credit: [B, T] A*_t. rewards: [B, T] TAC's r_t (fj.tac_rewards).
      a_seq, baseline, returns: [B] A_seq, V~(x_0), the outcome G.
      credit_total: [B] what sum_t A*_t telescopes to, whatever V_psi: A_seq in the
        warm-up and A_seq / T splits, A_seq + sum_{t < T_i - 1} r_t under TAC.
      delta: [B, T, A] log pi_T - log pi_old. scores: [B, T, A] s (HTA).
        weights: [B, T, A] omega (mean 1 over alloc_mask tokens). alloc_mask: [B, T, A]
        bool, the tokens the weights spread over (the action tokens).
      teacher, teacher_dist, teacher_support: the teacher's token log-probs [B, T, A] and
        distributions in the policy's layout ([B, T, K, A] over candidates; [B, T, A, V]
        and a support [B, T, 1, 1] for the generating actor).
      values, values_online: [B, T] the target and the online head's V(x_t).
        targets: [B, S] the step's critic targets at cont.idx (cont.valid).
      eta, kl_weight, warm: [] eta_k, lambda_k, whether k is a warm-up step.
      critic: the critic after this step's update; critic_metrics; cont: Continuations.
    """

    coef: chex.Array
    credit: chex.Array
    rewards: chex.Array
    credit_total: chex.Array
    a_seq: chex.Array
    baseline: chex.Array
    returns: chex.Array
    delta: chex.Array
    scores: chex.Array
    weights: chex.Array
    alloc_mask: chex.Array
    teacher: chex.Array
    teacher_dist: chex.Array
    teacher_support: chex.Array
    values: chex.Array
    values_online: chex.Array
    targets: chex.Array
    eta: chex.Array
    kl_weight: chex.Array
    warm: chex.Array
    critic: Any
    critic_metrics: Any
    cont: Any


# The two stages a FACTOR method chooses (docs/methods.md, FACTOR > Ablations):
#   action credit (tac [B, T], a_seq [B], turn_mask) -> A_t [B, T]: "how much";
#   token weights (scores [B, T, A], mask, eta, fc) -> omega [B, T, A]: "where".
ActionCredit = Callable[..., Any]
TokenWeights = Callable[..., Any]


def tac_action_credit(tac, a_seq, turn_mask):
    """A*_t of TAC (after the warm-up)."""
    return tac


def split_action_credit(tac, a_seq, turn_mask):
    """A_t = A_seq / T_i: the authors' credit without a critic ("without TAC")."""
    return fj.warmup_credit(a_seq, turn_mask)


def mixture_token_weights(scores, mask, eta, fc):
    """APM as the authors': omega = L ((1 - eta) / L + eta softmax(s / tau))."""
    return fj.apm_weights(scores, mask, eta, tau=fc.tau)


def uniform_token_weights(scores, mask, eta, fc):
    """omega = 1 on every allocated token ("without HTA")."""
    return fj.uniform_weights(mask, scores.dtype)


def softmax_token_weights(scores, mask, eta, fc):
    """The softmax of the clipped scores alone, summing to 1 ("without APM")."""
    return fj.softmax_weights(scores, mask, tau=fc.tau)


def factor_pieces(fc: FactorConfig, ctx: CreditContext, params, batch: Rollout, key, step,
                  critic_state, action_credit: ActionCredit = tac_action_credit,
                  token_weights: TokenWeights = mixture_token_weights) -> FactorPieces:
    """Everything a FACTOR credit computes for a batch (also used by Figure 5): rewards
    -> continuations -> critic step -> action credit -> HTA -> token weights -> C.

    step: the train step's 0-based counter (k = step + 1). The defaults are `factor`;
    the ablations pass other stages."""
    sched = Schedule.of(fc)
    rule, outcome = run_outcome_rule(fc, ctx.env)
    k = jnp.asarray(step, jnp.int32) + 1
    k_cont, k_push, k_step = jax.random.split(key, 3)
    g = episode_outcomes(batch, outcome)
    terminal, a_seq, baseline = fj.reward_construction(g, ctx.group_size, rule)
    # Critic: this step's targets into the replay, one step, Polyak (before the credit).
    cont, feats, targets, critic_state = replay_targets(fc, ctx, params, batch, k_cont,
                                                        k_push, g, critic_state)
    critic_state, cm = tac_critic.critic_steps(critic_state, k_step, fc.critic_lr,
                                               fc.critic_sample, sched.polyak,
                                               fc.critic_steps)
    values = tac_critic.head_value(critic_state.target, feats)         # target head
    values_online = tac_critic.head_value(critic_state.online, feats)
    rewards = fj.tac_rewards(batch.rewards, terminal, batch.turn_mask,
                             step_rewards_of(fc, outcome))
    tac = fj.tac_credit(rewards, values, baseline, batch.turn_mask)
    warm = k <= sched.warmup
    warmup = fj.warmup_credit(a_seq, batch.turn_mask)
    credit = jnp.where(warm, warmup, action_credit(tac, a_seq, batch.turn_mask))
    # sum_t A*_t does not depend on V_psi: the same credit with V_psi = 0 gives the total.
    tac_v0 = fj.tac_credit(rewards, jnp.zeros_like(values), baseline, batch.turn_mask)
    credit_total = jnp.sum(jnp.where(warm, warmup, action_credit(
        tac_v0, a_seq, batch.turn_mask)), axis=1)
    teacher, dist, support = teacher_outputs(ctx, params, batch, fc.teacher_prompt)
    delta = fj.hindsight_delta(teacher, batch.logp_old, batch.token_mask)
    eta = sched.eta(k, fc.eta0)
    mask = action_tokens(batch)
    scores = fj.hta_scores(delta, credit, mask, fc.clip_d)
    weights = token_weights(scores, mask, eta, fc)
    coef = fj.token_coefficients(credit, weights, mask)
    kl_weight = fc.kl_coef * fj.kl_schedule(k, sched.kl_decay)
    return FactorPieces(coef=coef, credit=credit, rewards=rewards, credit_total=credit_total,
                        a_seq=a_seq, baseline=baseline, returns=g,
                        delta=delta, scores=scores, weights=weights, alloc_mask=mask,
                        teacher=teacher, teacher_dist=dist, teacher_support=support,
                        values=values, values_online=values_online,
                        targets=targets, eta=eta, kl_weight=kl_weight, warm=warm,
                        critic=critic_state, critic_metrics=cm, cont=cont)


def _factor_factory(action_credit: ActionCredit = tac_action_credit,
                    token_weights: TokenWeights = mixture_token_weights):
    def factory(fc: FactorConfig, ctx: CreditContext):

        def credit(params, batch: Rollout, key, step, mstate=None) -> Credit:
            p = factor_pieces(fc, ctx, params, batch, key, step, mstate, action_credit,
                              token_weights)
            real = jnp.any(batch.token_mask, axis=-1)
            alloc = jnp.any(p.alloc_mask, axis=-1)
            cons = jnp.where(alloc, fj.conservation_error(p.weights, p.alloc_mask), 0.0)
            loss_inputs = {"a_seq": p.a_seq, "kl_weight": p.kl_weight}
            if fc.kl_coef > 0:   # the teacher's distributions, for kl_reduce
                loss_inputs[TEACHER_DIST] = p.teacher_dist
            metrics = {
                "aux_tokens": p.cont.aux_tokens, "env_calls": p.cont.env_calls,
                "factor/conservation_err_max": jnp.max(cons),
                "factor/telescoping_err_max": jnp.max(jnp.abs(
                    jnp.sum(p.credit, axis=1) - p.credit_total)),
                "factor/credit_abs_mean": jnp.sum(jnp.abs(p.credit) * real)
                / jnp.maximum(jnp.sum(real), 1),
                "factor/eta": p.eta, "factor/kl_weight": p.kl_weight,
                "factor/warmup": p.warm.astype(jnp.float32),
                "factor/value_mean": jnp.sum(p.values * batch.turn_mask)
                / jnp.maximum(jnp.sum(batch.turn_mask), 1),
                # How much of the online head's spread over states the target carries.
                "factor/target_online_spread": tac_critic.spread_ratio(
                    p.values, p.values_online, batch.turn_mask),
                "factor/checkpoints": jnp.sum(p.cont.valid.astype(jnp.float32)),
                "factor/scored": jnp.sum(p.cont.scored.astype(jnp.float32)),
            }
            metrics.update({f"factor/{k}": v for k, v in p.critic_metrics.items()})
            return Credit(coef=p.coef, value_targets=value_targets_mc(batch),
                          metrics=metrics, loss_inputs=loss_inputs, state=p.critic)
        return credit
    return factory


def _factor_policy_loss(fc: FactorConfig, ctx: CreditContext):
    """L_act + L_nonact (factor_jax.factor_policy_loss) over the action tokens and the
    other response tokens. The candidate-scoring actor writes action tokens only, so
    there L_nonact has no token to average (it is 0). Clipped at ppo.clip_eps with no dual
    clip, as the authors' (ppo.dual_clip does not reach this loss)."""

    def loss(out, mb: Rollout, credit: Credit, ppo):
        terms = fj.factor_policy_loss(out.logp, mb.logp_old, credit.coef,
                                      credit.loss_inputs["a_seq"], action_tokens(mb),
                                      nonaction_tokens(mb), ppo.clip_eps)
        m = {k: v for k, v in terms.items() if k not in ("act", "nonact")}
        m.update(loss_act=terms["act"], loss_nonact=terms["nonact"])
        return {"act": terms["act"], "nonact": terms["nonact"]}, m   # summed, logged apart
    return loss


def _factor_kl_loss(fc: FactorConfig, ctx: CreditContext):
    """lambda_k * token-mean forward KL(pi_T || pi_theta) over action tokens; None at
    factor.kl_coef = 0. The per-token KL is the update's pass reduced by kl_reduce."""
    if fc.kl_coef <= 0:
        return None

    def aux_loss(out, mb: Rollout, credit: Credit):
        kl = fj.kl_token_mean(out.reduced, action_tokens(mb))   # forward_kl, per token
        return credit.loss_inputs["kl_weight"] * kl, {"teacher_kl": kl}
    return aux_loss


def _factor_dist_reduce(fc: FactorConfig, ctx: CreditContext):
    """The update's pass reduced to the per-token KL to the teacher; None at kl_coef 0."""
    return kl_reduce if fc.kl_coef > 0 else None


def _factor_method(name: str, factory) -> Method:
    return Method(name, factory, make_config=factor_config, protocol=FACTOR_PROTOCOL,
                  make_policy_loss=_factor_policy_loss, make_aux_loss=_factor_kl_loss,
                  make_dist_reduce=_factor_dist_reduce,
                  init_state=init_critic_state, update_state=installs_credit_state,
                  host_prepare=continue_on_host, make_prefit=fit_critic_first)


FACTOR = _factor_method("factor", _factor_factory())
FACTOR_NO_TAC = _factor_method("factor_no_tac",
                               _factor_factory(action_credit=split_action_credit))
FACTOR_NO_HTA = _factor_method("factor_no_hta",
                               _factor_factory(token_weights=uniform_token_weights))
FACTOR_NO_APM = _factor_method("factor_no_apm",
                               _factor_factory(token_weights=softmax_token_weights))
METHODS = (FACTOR, FACTOR_NO_TAC, FACTOR_NO_HTA, FACTOR_NO_APM)
