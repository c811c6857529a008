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
file trains, builds it from config.fig5, and plots.

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
from factor_jax import critic as tac_critic
from factor_jax import figure5
from factor_jax.methods import Schedule, factor_config


def filler_id() -> int:
    """Token id of a filler word the environments' parsers drop ("the")."""
    from asct_jax.envs._common import FILLER_WORDS
    from asct_jax.envs.tokenizer import get_tokenizer

    return int(get_tokenizer().get_vocab()[FILLER_WORDS[0]])


# ----------------------------------------------------------------------------- panels

def feedback_control(delta, delta_nf, mask) -> Dict[str, float]:
    """Pearson r between Delta and Delta without the feedback over the tokens where
    either is non-zero (a forced token has Delta = 0 in both), and their mean |.|."""
    sel = np.asarray(mask) & ((np.asarray(delta) != 0) | (np.asarray(delta_nf) != 0))
    d, dn = np.asarray(delta)[sel], np.asarray(delta_nf)[sel]
    r = float(np.corrcoef(d, dn)[0, 1]) if sel.sum() > 2 and d.std() > 0 and dn.std() > 0 \
        else float("nan")
    return {"pearson_r": r, "tokens": int(sel.sum()), "abs_delta_mean": float(np.abs(d).mean())
            if sel.any() else 0.0, "abs_delta_no_feedback_mean": float(np.abs(dn).mean())
            if sel.any() else 0.0}


def critic_calibration(pieces, a_mc, v_mc, turn_mask, state_var=None) -> Dict[str, float]:
    """Panel (b)'s critic numbers: the share of interior actions (0 < t < T_i - 1, whose
    TAC credit is r_t + the target head's difference) with |A*_t| > 0.01, the critic's
    loss at this step, how much of the online head's spread over states the target
    carries, TAC's credit from the online head instead (its r and RMSE vs A^MC), and the
    target head's values against V_MC on the states 0 < t < T_i (value_corr). With
    state_var [B, T] (a bound on each V_MC's sampling variance, fj.mc_noise_var; 0 at
    x_0 = b and x_T = 0, which are exact): A^MC's spread over the actions beside a bound
    on its sampling noise, sqrt(mean_t (var(x_t) + var(x_{t+1}))): the error even a
    perfect critic would show."""
    tm = np.asarray(turn_mask)
    t = np.arange(tm.shape[1])[None, :]
    interior = tm & (t >= 1) & (t < tm.sum(-1, keepdims=True) - 1)
    inner = tm & (t >= 1)
    v, vm = np.asarray(pieces.values)[inner], np.asarray(v_mc)[inner]
    value_corr = (float(np.corrcoef(v, vm)[0, 1]) if len(v) > 2 and v.std() > 0
                  and vm.std() > 0 else float("nan"))
    credit = np.asarray(pieces.credit)
    online = fj.tac_credit(pieces.rewards, pieces.values_online, pieces.baseline,
                           jnp.asarray(tm))
    m = fj.calibration_metrics(online, jnp.asarray(a_mc), jnp.asarray(tm))
    out = {}
    if state_var is not None:
        var = np.where(tm & (t >= 1), np.asarray(state_var), 0.0)   # per state x_t
        var_next = np.pad(var[:, 1:], ((0, 0), (0, 1)))            # x_{t+1}; 0 at x_T
        out = {"mc_credit_sd": float(np.asarray(a_mc)[tm].std()),
               "mc_noise_sd": float(np.sqrt((var + var_next)[tm].mean()))}
    return {**out, "interior_actions": int(interior.sum()),
            "interior_credit_share": float((np.abs(credit[interior]) > 0.01).mean())
            if interior.any() else float("nan"),
            "critic_loss": float(pieces.critic_metrics["critic_loss"]),
            "target_online_spread": float(tac_critic.spread_ratio(
                pieces.values, pieces.values_online, jnp.asarray(tm))),
            "corr_online": float(m["corr"]), "rmse_online": float(m["rmse"]),
            "value_corr": value_corr}


def interior_calibration(credit, a_mc, rewards, turn_mask) -> Dict[str, float]:
    """r of TAC's credit with A^MC on the interior actions (0 < t < T_i - 1), where both
    are r_t plus a difference of two values of states after x_0 and before x_T (no
    boundary term), with and without the r_t they share (science's progress rewards
    correlate them by themselves): corr_interior, corr_interior_without_r (the values'
    differences alone, V(x_{t+1}) - V(x_t) vs V_MC's)."""
    tm = np.asarray(turn_mask)
    t = np.arange(tm.shape[1])[None, :]
    interior = tm & (t >= 1) & (t < tm.sum(-1, keepdims=True) - 1)
    r = lambda x, y: float(fj.calibration_metrics(  # noqa: E731
        jnp.asarray(x), jnp.asarray(y), jnp.asarray(interior))["corr"])
    return {"corr_interior": r(credit, a_mc),
            "corr_interior_without_r": r(credit - rewards, a_mc - rewards)}


def progress_delta(delta, delta_nf, mask, progress, turn_mask) -> Dict[str, float]:
    """The teacher's mean Delta per action (sum_j Delta_{t,j} over its allocated tokens
    [B, T, A]: log pi_T(y | x, fb) - log pi_old(y | x)) on the actions whose step made
    progress (progress [B, T], judged by the environment) and on those that did not, with
    the feedback and without it (the control's Delta); NaN where there are none."""
    m = np.asarray(mask)
    per = lambda d: np.sum(np.where(m, np.asarray(d), 0.0), -1)  # noqa: E731
    real, prog = np.asarray(turn_mask), np.asarray(progress)
    out = {"progress_actions": int((real & prog).sum()),
           "no_progress_actions": int((real & ~prog).sum())}
    for name, d in (("", delta), ("_no_feedback", delta_nf)):
        for which, sel in (("progress", real & prog), ("no_progress", real & ~prog)):
            out[f"delta_{which}_mean{name}"] = (float(per(d)[sel].mean()) if sel.any()
                                                else float("nan"))
    return out


def term_grad_norms(run_dir: str, steps=(1, 5, None)) -> Dict[str, float]:
    """{grad_<term>@<step>: ||d term / d params||} of a run trained with
    ppo.term_grad_norms (metrics.jsonl's train/grad_norm/<term>) at `steps` (None: the
    last); {} when the run logged none."""
    from asct_jax.infra.run_logger import read_jsonl

    recs = [r for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
            if any(k.startswith("train/grad_norm/") for k in r)]
    out = {}
    for want in steps:
        r = recs[-1] if (want is None and recs) else next(
            (r for r in recs if r.get("step") == want), None)
        for k, v in (r or {}).items():
            if k.startswith("train/grad_norm/"):
                out[f"grad_{k.rpartition('/')[2]}@{r['step']}"] = float(v)
    return out


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


def plot(res: Dict[str, Any], path: str, title: str = "") -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from asct_jax.infra.run_logger import atomic_savefig

    arr = res["_arrays"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    # (a) conservation
    ax = axes[0]
    bins = np.linspace(0.0, 1.0, 51)
    c = res["conservation"]
    ax.hist(np.clip(arr["cons_apm"], 0, 1), bins=bins, alpha=0.7, color="C0",
            label=f"APM (max {c['apm_max']:.1e})")
    ax.hist(np.clip(arr["cons_softmax"], 0, 1), bins=bins, alpha=0.6, color="C3",
            label=f"softmax, no APM (mean {c['softmax_mean']:.2f})")
    ax.set_yscale("log")
    ax.set_xlabel(r"$|\mathrm{mean}_j\,\omega_{t,j} - 1|$")
    ax.set_ylabel("actions")
    ax.set_title(f"(a) conservation ({c['n_actions']} actions, late)")
    ax.legend(fontsize=8)
    # (b) calibration
    ax = axes[1]
    lo_hi = []
    for phase, color in (("early", "C1"), ("warmed", "C0"), ("late", "C2")):
        if f"mc_{phase}" not in arr:
            continue
        x, y = arr[f"mc_{phase}"], arr[f"credit_{phase}"]
        m = res[f"calibration_{phase}"]
        ax.scatter(x, y, s=9, alpha=0.5, color=color,
                   label=f"{phase}: r={m['corr']:.2f}, RMSE={m['rmse']:.3f} (n={int(m['count'])})")
        lo_hi += [x.min(initial=0), y.min(initial=0), x.max(initial=0), y.max(initial=0)]
    lim = (min(lo_hi) - 0.05, max(lo_hi) + 0.05)
    ax.plot(lim, lim, "k--", lw=1, label="identity")
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_xlabel(r"Monte-Carlo credit $A^{MC}_t$ (TAC's coordinate)")
    ax.set_ylabel(r"TAC credit $A^*_t$")
    ax.set_title("(b) calibration")
    ax.legend(fontsize=8)
    # (c) perturbation
    ax = axes[2]
    p = res["perturbation"]
    if "table" in p:
        modes = list(p["modes"])
        xs = np.arange(2 * len(modes), dtype=float)
        xs[len(modes):] += 0.6  # a gap between the two credit signs
        labels = [f"{mode}\nA*{'>' if s == 'pos' else '<'}0" for s in ("pos", "neg")
                  for mode in modes]
        for w, (which, color) in enumerate((("high", "C4"), ("low", "C7"))):
            rows = [p["table"][f"{mode}/{which}/{s}"] for s in ("pos", "neg") for mode in modes]
            ax.bar(xs + (w - 0.5) * 0.38, [r["mean"] for r in rows], width=0.38,
                   yerr=[0 if np.isnan(r["se"]) else r["se"] for r in rows], capsize=3,
                   color=color, label=f"{which}-allocated token")
        ax.set_xticks(xs, labels, fontsize=8)
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_ylabel("mean return change (± s.e.)")
        ax.set_title(f"(c) token perturbation (A*>0: n={p['n_pos']}, A*<0: n={p['n_neg']})",
                     fontsize=10)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, p.get("skipped", "no eligible actions"), ha="center")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    atomic_savefig(fig, path)
    plt.close(fig)
    return path


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
    from experiments.configs.base import ADDED_DEFAULTS, BOOKKEEPING_FIELDS, without_retired
    from experiments.harness.dotted import apply_overrides, flatten, under

    path = os.path.join(config.train.results_dir, config.fig5.train_run)
    allowed = "'' (train here) or <experiment>/<run> of a finished FACTOR run"
    if not os.path.exists(os.path.join(path, "summary.json")):
        raise config_cli.ConfigError("fig5.train_run", f"{path} holds no finished run",
                                     allowed)
    with open(os.path.join(path, "config.json")) as f:
        stored = {**ADDED_DEFAULTS, **without_retired(flatten(json.load(f)))}
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


def format_summary(res: Dict[str, Any]) -> str:
    c = res["conservation"]
    lines = [f"(a) conservation over {c['n_actions']} actions: APM max {c['apm_max']:.2e}, "
             f"softmax mean {c['softmax_mean']:.3f} (1 - 1/L: {c['softmax_expected_mean']:.3f})"]
    for phase in ("early", "warmed", "late"):
        m = res.get(f"calibration_{phase}")
        if m is None:
            continue
        lines.append(f"(b) {phase:6s}: corr {m['corr']:.3f} (interior "
                     f"{m.get('corr_interior', np.nan):.3f}, without r_t "
                     f"{m.get('corr_interior_without_r', np.nan):.3f})  rmse {m['rmse']:.3f}  "
                     f"mae {m['mae']:.3f}  bias {m['bias']:+.3f}  n {int(m['count'])}  "
                     f"return {m['return_mean']:.3f}")
        if "interior_credit_share" in m:
            lines.append(f"    {phase:6s} critic: |A*| > 0.01 on {m['interior_credit_share']:.2f}"
                         f" of {m['interior_actions']} interior actions, loss "
                         f"{m['critic_loss']:.4f}, target/online spread "
                         f"{m['target_online_spread']:.2f}, online head's credit: corr "
                         f"{m['corr_online']:.3f} rmse {m['rmse_online']:.3f}, r(V, V_MC) "
                         f"{m['value_corr']:.3f}, A^MC sd {m.get('mc_credit_sd', np.nan):.3f}"
                         f" (noise <= {m.get('mc_noise_sd', np.nan):.3f}, estimated "
                         f"{m.get('mc_noise_sd_est', np.nan):.3f})")
        e = m.get("env_coordinate")
        if e is not None:
            lines.append(f"    {phase:6s} env-coordinate reference: corr {e['corr']:.3f}  rmse "
                         f"{e['rmse']:.3f}, r(V, V_MC) {e['value_corr']:.3f}, A^MC sd "
                         f"{e['mc_credit_sd']:.3f} (noise <= {e['mc_noise_sd']:.3f}); "
                         f"unscored states {m['mc_unscored_states']}")
    for phase in ("early", "late"):
        f = res[f"feedback_control_{phase}"]
        lines.append(f"    {phase:5s} feedback control: r(Delta, Delta without feedback) "
                     f"{f['pearson_r']:.3f} over {f['tokens']} tokens, |Delta| "
                     f"{f['abs_delta_mean']:.3f} vs {f['abs_delta_no_feedback_mean']:.3f}")
        if "delta_progress_mean" in f:
            lines.append(f"    {phase:5s} mean Delta per action, progress / none: "
                         f"{f['delta_progress_mean']:+.3f} / {f['delta_no_progress_mean']:+.3f} "
                         f"(n {f['progress_actions']} / {f['no_progress_actions']}); without "
                         f"feedback {f['delta_progress_mean_no_feedback']:+.3f} / "
                         f"{f['delta_no_progress_mean_no_feedback']:+.3f}")
    if res.get("term_grad_norms"):
        lines.append("    term grad norms: " + ", ".join(
            f"{k} {v:.3g}" for k, v in res["term_grad_norms"].items()))
    p = res["perturbation"]
    if "skipped" in p:
        lines.append(f"(c) perturbation: skipped ({p['skipped']})")
    else:
        lines.append(f"(c) perturbation: {p['n_pos']} positive, {p['n_neg']} negative actions")
    for key, row in p.get("table", {}).items():
        lines.append(f"    {key:18s} {row['mean']:+.4f} ± {row['se']:.4f}  "
                     f"(n {row['n']}, changed {row['changed_frac']:.2f}, "
                     f"forced token {row['forced_token_frac']:.2f})")
    lines.append("timing (s): " + ", ".join(f"{k} {v:.1f}" for k, v in res["timing_s"].items()))
    return "\n".join(lines)


if __name__ == "__main__":
    config_cli.run_main(main)
