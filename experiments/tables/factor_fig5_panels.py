"""The numbers and the plot of Figure 5's panels (experiments/tables/factor_fig5.py, whose
docstring defines them): the feedback control and the teacher's Delta on progress actions
(panel a), the critic's calibration numbers (panel b), the training run's gradient norms
per loss term, the three-panel figure and the printed summary. Pure functions of the
arrays and the results dict that factor_fig5.run_diagnostics computes.
"""
from __future__ import annotations

import os
from typing import Any, Dict

import jax.numpy as jnp
import numpy as np

import factor_jax as fj
from factor_jax import critic as tac_critic


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
