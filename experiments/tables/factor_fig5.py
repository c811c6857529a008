"""FACTOR diagnostics, the paper's Figure 5 (docs/methods.md, FACTOR > Diagnostics).

    python -m experiments.tables.factor_fig5 --config experiments/configs/factor_fig5.py
    python -m experiments.tables.factor_fig5 --config experiments/configs/factor_fig5.py:quick

Trains FACTOR (method "factor") on one environment (default `shop`, small) with the
trainer (from the shared warm start with fig5.warm_start), keeping the initial parameters
("early": the warm-started actor's, if any) and the final ones ("late"), then draws
three panels on fresh diagnostic batches (`config.fig5.*`). With fig5.train_run
("<experiment>/<run>") it trains nothing and diagnoses that finished FACTOR run instead
(its config.json's training fields, its last checkpoint as "late"; `adopt_run`):

(a) Conservation. On a batch rolled out with the late parameters, FACTOR's token weights
    omega are computed exactly as the `factor` credit computes them (continuations ->
    critic step -> TAC -> HTA -> APM, same calls, same key use as factor_jax/methods.py,
    at the first step with eta_k > 0, factor_jax.figure5.credit_step), and the
    distribution of |mean_j omega_{t,j} - 1| over the actions (the tokens the weights
    spread over: the action's tokens) is plotted; the no-APM
    softmax variant (fj.softmax_weights, weights summing to 1, error 1 - 1/L_t) is
    overlaid for contrast. The feedback control (a check beyond the FACTOR paper's
    Figure 5): the same Delta with the feedback removed from the teacher's prompt (its
    header and footer kept) and
    its Pearson r with the real Delta over the tokens where either is non-zero: a high r
    says the teacher reads the format, not the outcome.

(b) Calibration. For the early and the late parameters, each on its own batch and with
    its own TAC critic (the method state at that point; the early one untrained): the
    TAC credit A*_t as the method computes it at the first step with HTA active (the
    target head's values, after the critic step on this batch's continuations) against
    an independent high-sample Monte-Carlo credit for the same step in TAC's coordinate,

        A^MC_t = r_t + V_MC(x_{t+1}) - V_MC(x_t),

    r_t TAC's own (the environment's rewards, the last turn's replaced by the terminal
    reward of the reward construction), V_MC(x_t) what the critic predicts there: the
    mean outcome G of `fig5.mc_rollouts` rollouts of pi_old (the parameters that
    collected the batch) from the stored state x_t that end within factor.horizon, put
    in the reward coordinate of the trajectory's group as the critic's targets are
    (household, science: the success itself; shop: the score standardised with the
    group's mean and SD), with TAC's boundaries V(x_0) = V~(x_0) (household: the
    leave-one-out mean; shop, science: 0) and V(x_T) = 0: a critic equal to V_MC gives
    A* = A^MC. Independent: fresh policy keys, no value head. The environment's own
    randomness travels with the stored state (common random numbers, see
    asct_jax/search/rollout_value.py), for both estimates. Pearson r, RMSE, MAE and bias
    over all real actions (factor_jax.calibration_metrics). `env_coordinate`: the same
    against the reference before issue 38, from the same rollouts (V_MC the mean return
    to go, A^MC with the environment's rewards): equal on household, not a calibration
    of TAC on shop and science. `corr_interior` (`_without_r`): r over the interior
    actions 0 < t < T_i - 1 alone, where both credits are r_t plus a difference of two
    values (without the shared r_t: the values' differences alone).
    "warmed": the same for the run at the end of the critic's warm-up (its parameters
    and critic after the warm-up's last step, checkpointed for it: the credit is the
    first TAC credit); "early"'s critic is untrained. Beside them (critic_calibration):
    the share of interior actions with |A*_t| > 0.01, the critic's loss, the target
    head's spread over states relative to the online head's, and the online head's TAC
    credit against A^MC (does the Polyak lag or the fit limit the credit?).

(c) Perturbation. Among the late batch's actions with positive and with negative TAC
    credit (|A*_t| >= fig5.min_abs_credit, at least two allocated tokens and distinct
    highest- and lowest-weighted tokens), up to `fig5.perturb_actions` of each sign are
    drawn at random. For each, the highest-allocated (argmax_j omega_{t,j}) and,
    separately, the lowest-allocated token is perturbed; the stored state x_t is restored,
    the perturbed action is stepped and pi_old is rolled to the end. The unperturbed
    action is replayed from the same state with the same policy keys (common random
    numbers), and the return change  Delta = (r_t + G_{>t})_perturbed - (...)_original  is
    averaged over `fig5.perturb_rollouts` rollouts per action; the table reports the mean
    over actions and its standard error (actions are the unit), per
    {high, low} x {positive, negative credit} and per perturbation mode:

      "delete": the token is replaced by the filler word "the", which
               every text environment's parser drops, i.e. the token is deleted from the
               action. Deleting an object/verb token makes the action unparseable (the
               turn becomes "nothing happens") or turns it into another action; deleting
               a filler word or EOS leaves the action unchanged (Delta = 0 exactly). So
               the high-vs-low contrast asks whether HTA put the weight on the tokens the
               environment actually reads.
      "swap":  the token is replaced by the token another legal candidate at x_t has at
               that position, that candidate being equal to the action everywhere else
               (e.g. "select color red" -> "select color blue", "click on the p3 item" ->
               "... p1 ..."): a one-token counterfactual action. Where no such candidate
               exists (fillers, EOS, tokens shared by all candidates) it falls back to
               "delete".
      "unk":   the token is replaced by UNK_ID. Every such replacement makes the action
               unparseable (UNK is not a filler), whichever token it hits, so high and low
               should agree: a control for what "the action is lost" costs.

    `changed_frac` is the fraction of perturbed actions whose immediate outcome (feedback
    or reward) differs from the original's; `forced_token_frac` the fraction whose perturbed
    token was forced by constrained decoding (log pi_old = 0: structure words shared by
    every candidate, EOS), whose hindsight score is 0. Ties in omega go to the first
    position (factor_jax.extreme_tokens). This is a local diagnostic, not a causal
    proof: it perturbs one token of one action from one stored state, with the policy and
    the environment's parser as they are; it says how the return responds to that edit,
    not that the weights identify the tokens that caused the return.

Outputs: results/factor_fig5/<fig5.name>.png (three panels) and .json (the numbers),
written atomically, and a printed summary. The Monte-Carlo rollouts (panels b, c) are
jitted and vmapped over states, rollouts and variants (jax.lax.map in chunks of
`fig5.chunk` rollouts to bound memory); only the choice of which states/actions to use is
made on the host (so the compiled shapes are padded to whole chunks). The kernels are
factor_jax.diagnostics (conservation, mc_state_values, mc_credit, perturbable_actions,
perturbed_actions, perturbation_returns), run by factor_jax.figure5.Diagnostics; this
file trains, builds it from config.fig5 and runs it; the panels' numbers from its arrays,
the plot and the summary are experiments/tables/factor_fig5_panels.py.

Runtime on 2 shared (loaded) CPU cores, measured: quick 88 s from scratch (30 s of it the
4 training steps; 35 s when the finished training run is reused); full default 445 s
(training 60 steps 264 s, diagnostics ~180 s).

On `shop` small almost every action token is read by the parser (only "the"/"now" in two
templates are fillers, and ties in omega among forced tokens go to the first position),
so "delete" and "unk" perturbations both turn the action into "nothing happens" whichever
token they hit (changed_frac = 1, identical high/low rows); only "swap" separates high
from low there.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

import factor_jax as fj
from asct_jax.infra import config_cli
from experiments.tables.factor_fig5_panels import (critic_calibration, feedback_control,
                                                   format_summary, interior_calibration,
                                                   plot, progress_delta, term_grad_norms)
from factor_jax import figure5
from factor_jax.methods import Schedule, factor_config


def filler_id() -> int:
    """Token id of a filler word the environments' parsers drop ("the")."""
    from asct_jax.envs._common import FILLER_WORDS
    from asct_jax.envs.tokenizer import get_tokenizer

    return int(get_tokenizer().get_vocab()[FILLER_WORDS[0]])


def diagnostics(config, env, env_params, policy, ctx) -> figure5.Diagnostics:
    """factor_jax.figure5.Diagnostics of an experiment, with config.fig5's settings."""
    f5 = config.fig5
    if int(f5.group_size) != ctx.group_size:
        raise config_cli.ConfigError(
            "fig5.group_size", f"{f5.group_size} differs from rollout.group_size "
            f"{ctx.group_size} (the credit's group baseline uses the latter)",
            str(ctx.group_size))
    return figure5.Diagnostics(
        factor_config(config), env, env_params, policy, ctx, num_groups=int(f5.num_groups),
        mc_rollouts=int(f5.mc_rollouts), perturb_rollouts=int(f5.perturb_rollouts),
        perturb_modes=tuple(f5.perturb_modes), perturb_actions=int(f5.perturb_actions),
        min_abs_credit=f5.min_abs_credit, chunk=int(f5.chunk), filler=filler_id())


# ----------------------------------------------------------------------------- driver

def run_diagnostics(config, pieces, early_params, late_params,
                    diag: Optional[figure5.Diagnostics] = None,
                    warmed_params=None) -> Dict[str, Any]:
    """All three panels' numbers (and, under "_arrays", the arrays the figure needs).

    early_params, late_params: (policy parameters, method state) of each phase;
    warmed_params (optional): the run's at the end of the critic's warm-up (panel b's
    first TAC credit: calibration_warmed).
    pieces: (env, env_params, policy, CreditContext), see exp_parts; `diag` reuses the
    compiled functions of an existing Diagnostics for the same pieces and config."""
    diag = diag if diag is not None else diagnostics(config, *pieces)
    key = jax.random.fold_in(jax.random.key(config.seed), 10_000 + int(config.fig5.seed))
    k = dict(zip(("roll_early", "roll_late", "cred_early", "cred_late", "mc_early",
                  "mc_late", "perturb"), jax.random.split(key, 7)))
    # "warmed": the run at the end of the critic's warm-up (its own keys; the others' kept).
    k.update(zip(("roll_warmed", "cred_warmed", "mc_warmed"),
                 jax.random.split(jax.random.fold_in(key, 1), 3)))
    res: Dict[str, Any] = {"timing_s": {}}
    arrays: Dict[str, Any] = {}
    phases = (("late", late_params), ("early", early_params)) + (
        (("warmed", warmed_params),) if warmed_params is not None else ())
    for phase, (params, mstate) in phases:
        t0 = time.time()
        batch = diag.collect(params, k[f"roll_{phase}"])
        pieces, cons, tac_sum_err, delta_nf = diag.parts(params, batch, k[f"cred_{phase}"],
                                                         mstate)
        ref = diag.mc_credit(params, batch, pieces, k[f"mc_{phase}"])
        a_mc = ref["a_mc"]
        tm = np.asarray(batch.turn_mask)
        credit = np.asarray(pieces.credit)
        metrics = lambda a: {kk: float(vv) for kk, vv in fj.calibration_metrics(  # noqa: E731
            jnp.asarray(credit), jnp.asarray(a), jnp.asarray(tm)).items()}
        cal = metrics(a_mc)
        cal["reference"] = "tac_coordinate"
        cal.update(interior_calibration(credit, a_mc, np.asarray(pieces.rewards), tm))
        cal["mc_unscored_states"] = int(ref["unscored"].sum())
        cal["return_mean"] = float(np.asarray(pieces.returns).mean())
        cal["episode_len_mean"] = float(tm.sum(-1).mean())
        cal["tac_sum_err_max"] = float(np.max(np.asarray(tac_sum_err)))
        cal["checkpoint_frac"] = float(np.asarray(pieces.cont.valid).sum() / tm.sum())
        cal["critic_value_mean"] = float(np.asarray(pieces.values)[tm].mean())
        cal.update(critic_calibration(pieces, a_mc, ref["v_mc"], tm, ref["var"]))
        # the noise estimated from the rollouts' own spread (the bound's Bernoulli variance
        # is loose for shop's continuous score)
        cal["mc_noise_sd_est"] = critic_calibration(pieces, a_mc, ref["v_mc"], tm,
                                                    ref["var_est"])["mc_noise_sd"]
        # The environment's coordinate (panel b's reference before issue 38): the same on
        # household, where the two coordinates agree.
        env = critic_calibration(pieces, ref["a_mc_env"], ref["v_mc_env"], tm, ref["var_env"])
        cal["env_coordinate"] = {**metrics(ref["a_mc_env"]), **{
            kk: env[kk] for kk in ("value_corr", "mc_credit_sd", "mc_noise_sd", "corr_online",
                                   "rmse_online")}}
        res[f"calibration_{phase}"] = cal
        res[f"feedback_control_{phase}"] = feedback_control(pieces.delta, delta_nf,
                                                            pieces.alloc_mask)
        if config.get("actor", {}).get("chooser", "candidates") == "candidates":
            res[f"feedback_control_{phase}"].update(progress_delta(
                pieces.delta, delta_nf, pieces.alloc_mask,
                diag.progress(batch, jax.random.fold_in(k[f"cred_{phase}"], 1)), tm))
        arrays[f"credit_{phase}"], arrays[f"mc_{phase}"] = credit[tm], a_mc[tm]
        res["timing_s"][f"{phase}_rollout_credit_mc"] = time.time() - t0
        if phase == "late":
            real = np.asarray(cons.real)
            ca, cs = np.asarray(cons.cons_apm)[real], np.asarray(cons.cons_softmax)[real]
            lens = np.asarray(pieces.alloc_mask).sum(-1)[real]
            res["conservation"] = {
                "n_actions": int(real.sum()),
                "apm_max": float(ca.max()), "apm_mean": float(ca.mean()),
                "softmax_mean": float(cs.mean()), "softmax_min": float(cs.min()),
                "softmax_max": float(cs.max()),
                "softmax_expected_mean": float(np.mean(1.0 - 1.0 / lens)),
            }
            arrays["cons_apm"], arrays["cons_softmax"] = ca, cs
            t0 = time.time()
            if config.get("actor", {}).get("chooser", "candidates") == "generate":
                # (c) swaps a token for another legal candidate's: not defined for a
                # response written over the full vocabulary.
                res["perturbation"] = {"skipped": "not defined for a generating actor"}
            else:
                res["perturbation"] = diag.perturbation(
                    params, batch, pieces, k["perturb"],
                    seed=int(config.seed) + int(config.fig5.seed))
            res["timing_s"]["perturbation"] = time.time() - t0
    res["_arrays"] = arrays
    return res


def main(config):
    run(config)


def run(config) -> Dict[str, Any]:
    """Trains, computes the three panels, writes the PNG and the JSON; returns the numbers."""
    from asct_jax.infra.checkpoint import Checkpointer, NonFiniteLossError
    from asct_jax.infra.run_logger import atomic_write_json
    from asct_jax.rl.train_step import policy_params
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    from experiments.harness import registry
    from experiments.harness.runner import restore_run_state, train_run

    t_start = time.time()
    adopted = config.fig5.get("train_run", "")
    if adopted:
        config, summary = adopt_run(config)
    elif config.fig5.get("warm_start"):
        from experiments.harness.warm_start import shared
        config = config.copy_and_resolve_references()
        config.train.init_from = shared(config)
    warmup = Schedule.of(factor_config(config)).warmup
    if not adopted and 0 < warmup < config.train.steps:   # keep the warm-up's last step
        config.train.checkpoint_every = warmup
        config.train.keep = -(-config.train.steps // warmup) + 1
    tc = config.train
    source = JaxEnvSource(config)
    learner = build_learner(config, registry.get(config.method), source)
    early = (policy_params(learner.init_state), learner.init_state.method_state)
    t0 = time.time()
    if adopted:   # the finished run's last checkpoint, method state (the critic) included
        ckdir = os.path.join(tc.results_dir, adopted, "checkpoints")
        state, last = restore_run_state(learner, ckdir)
        if last != tc.steps:
            raise config_cli.ConfigError(
                "fig5.train_run", f"{ckdir} ends at step {last}, its run at "
                f"{tc.steps}", "a run whose last step was checkpointed")
        late, reused = (policy_params(state), state.method_state), True
    else:
        ckdir = os.path.join(tc.results_dir, tc.experiment, tc.run, "checkpoints")
        reused = tc.resume and os.path.isdir(ckdir) and Checkpointer(
            ckdir, save_every=tc.checkpoint_every, keep=tc.keep).latest_step() == tc.steps
        try:
            summary, state = train_run(config, return_state=True)
            late = (policy_params(state), state.method_state)
        except (NonFiniteLossError, FileExistsError) as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(1)
    train_s = time.time() - t0
    warmed = None
    if not adopted and warmup in Checkpointer(ckdir).all_steps() and warmup < tc.steps:
        st, _ = restore_run_state(learner, ckdir, step=warmup)
        warmed = (policy_params(st), st.method_state)
    res = run_diagnostics(config, exp_parts(config, source, learner), early, late,
                          warmed_params=warmed)
    res["timing_s"]["train"] = train_s
    res["train_reused"] = bool(reused)
    res["train_run"] = adopted or os.path.join(tc.experiment, tc.run)
    res["train_summary"] = summary
    res["term_grad_norms"] = term_grad_norms(os.path.join(tc.results_dir, res["train_run"]))
    res["config"] = config_cli.config_to_dict(config)
    out_dir = os.path.join(tc.results_dir, "factor_fig5")
    name = config.fig5.name
    title = (f"FACTOR diagnostics: {config.env.name} ({config.env.size}), "
             f"{tc.steps} steps, seed {config.seed}")
    png = plot(res, os.path.join(out_dir, f"{name}.png"), title)
    res["runtime_s"] = time.time() - t_start
    res.pop("_arrays")
    js = atomic_write_json(os.path.join(out_dir, f"{name}.json"), res)
    print(format_summary(res))
    print(f"wrote {png}\nwrote {js}")
    return res


def adopt_run(config) -> Tuple[Any, Dict[str, Any]]:
    """(config, summary) for diagnosing the finished run results_dir/<fig5.train_run>
    instead of training one: `config` with every field of the run's config.json that
    decides what it trained (all but the bookkeeping fields and table.*), its fig5.*
    kept; the run's summary.json. ConfigError (one line) when there is no finished FACTOR
    run there or a stored field is not one of this config's."""
    import json

    from asct_jax.infra.config_cli import config_to_dict
    from experiments.harness.dotted import apply_overrides, flatten, under
    from experiments.harness.stored_fields import BOOKKEEPING_FIELDS, as_current

    path = os.path.join(config.train.results_dir, config.fig5.train_run)
    allowed = "'' (train here) or <experiment>/<run> of a finished FACTOR run"
    if not os.path.exists(os.path.join(path, "summary.json")):
        raise config_cli.ConfigError("fig5.train_run", f"{path} holds no finished run",
                                     allowed)
    with open(os.path.join(path, "config.json")) as f:
        stored = as_current(json.load(f))
    if stored.get("method") != "factor":
        raise config_cli.ConfigError("fig5.train_run",
                                     f"{path} trained {stored.get('method')!r}", allowed)
    ours = flatten(config_to_dict(config))
    fields = {k: v for k, v in stored.items()
              if not under(k, BOOKKEEPING_FIELDS + ("fig5",)) and ours.get(k) != v}
    lists = {k for k, v in flatten(config.to_dict()).items() if isinstance(v, tuple)}
    config = apply_overrides(config, {k: tuple(v) if k in lists else v
                                      for k, v in fields.items()})
    with open(os.path.join(path, "summary.json")) as f:
        return config, json.load(f)


def exp_parts(config, source, learner):
    """(env, env_params, policy, CreditContext) of a run's source and learner."""
    return source.env, source.env_params, learner.policy, learner.ctx


if __name__ == "__main__":
    config_cli.run_main(main)
