"""FACTOR's Figure 5 on one experiment (docs/methods.md, FACTOR > Diagnostics): the
`factor` credit's pieces at the first step with HTA active, and `Diagnostics`, the jitted
factor_jax.diagnostics kernels with the host-side choice of which states and actions they
see. experiments/tables/factor_fig5.py trains, runs these and plots.

Shapes: B episodes, T turns, A action tokens, K candidates, N chosen states / actions,
R rollouts per action.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import factor_jax as fj
from asct_jax.envs.base import UNK_ID
from asct_jax.rl.credit import CreditContext, state_actor
from factor_jax.hindsight.progress import step_progress
from asct_jax.rl.rollout import rollout
from factor_jax.critic_replay import run_outcome_rule
from factor_jax.methods import FactorConfig, Schedule, factor_pieces
from factor_jax.teacher import teacher_log_probs


def credit_step(fc: FactorConfig) -> int:
    """The 0-based step the diagnostics compute the credit at: the first step with HTA
    active (k = the schedule's eta_start), so omega is the authors' mixture, not the
    warm-up's or the late uniform weights."""
    return Schedule.of(fc).eta_start - 1


def factor_parts(fc: FactorConfig, ctx: CreditContext, params, batch, key, mstate, step):
    """The `factor` credit's pieces (factor_jax.methods.factor_pieces, the same code the
    credit runs, with the method state `mstate` of the parameters' run), panel (a)'s
    conservation errors (with the softmax, no-APM weights of the same scores), TAC's
    telescoping error [B] and the feedback control: Delta with the teacher's feedback
    removed (header and footer kept). Jittable (fc, ctx static).

    Returns (FactorPieces, fj.Conservation, tac_sum_err [B], delta_no_feedback [B, T, A])."""
    p = factor_pieces(fc, ctx, params, batch, key, step, mstate)
    cons = fj.conservation(p.weights, p.scores, p.alloc_mask, tau=fc.tau)
    no_feedback = batch.replace(feedback=jnp.zeros_like(batch.feedback))   # PAD only
    teacher_nf = teacher_log_probs(ctx, params, no_feedback, fc.teacher_prompt)
    delta_nf = fj.hindsight_delta(teacher_nf, batch.logp_old, batch.token_mask)
    return p, cons, jnp.abs(jnp.sum(p.credit, axis=1) - p.credit_total), delta_nf


def _take(tree, *idx):
    return jax.tree.map(lambda x: x[idx], tree)


def _pad_idx(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple)


class Diagnostics:
    """The jitted factor_jax.diagnostics kernels for one experiment (env, policy, credit
    context), and the host-side choice of which states and actions they see.

    Args:
      fc: FACTOR's config. env, env_params, policy, ctx: the experiment's.
      num_groups: groups of ctx.group_size episodes per diagnostic batch.
      mc_rollouts: M rollouts per state of V_MC (panel b).
      perturb_rollouts: R rollouts per perturbed action; perturb_actions: at most this many
        actions of each credit sign; perturb_modes: "delete" | "swap" | "unk";
        min_abs_credit: |A*_t| below this is neither sign (panel c).
      chunk: rollouts per jax.lax.map chunk (memory). filler: the token id of a word the
        environments' parsers drop.
    """

    def __init__(self, fc: FactorConfig, env, env_params, policy, ctx: CreditContext, *,
                 num_groups: int, mc_rollouts: int, perturb_rollouts: int,
                 perturb_modes: Sequence[str], perturb_actions: int, min_abs_credit: float,
                 chunk: int, filler: int):
        self.env, self.env_params, self.ctx, self.policy = env, env_params, ctx, policy
        self.M, self.R = int(mc_rollouts), int(perturb_rollouts)
        self.modes = tuple(perturb_modes)
        self.perturb_actions, self.min_abs_credit = int(perturb_actions), min_abs_credit
        self.chunk, self.filler = int(chunk), int(filler)
        self.mc_states_per_chunk = max(1, self.chunk // self.M)
        step = credit_step(fc)
        self.collect = jax.jit(lambda p, k: rollout(policy, p, env, env_params, k,
                                                    int(num_groups), ctx.group_size))
        self.parts = jax.jit(lambda p, batch, k, ms: factor_parts(fc, ctx, p, batch, k, ms,
                                                                  step))
        rule, outcome = run_outcome_rule(fc, env)
        self._mc = jax.jit(lambda p, states, keys, prefix: fj.mc_state_outcomes(
            env, env_params, state_actor(ctx, p), states, keys, prefix, self.M,
            fc.horizon, outcome, self.mc_states_per_chunk))
        self._references = jax.jit(lambda batch, pieces, o: fj.mc_references(
            pieces.rewards, batch.rewards, pieces.baseline, pieces.returns, batch.turn_mask,
            o["outcome"], o["scored"], o["ret"], ctx.group_size, rule, self.M,
            o["outcome_var"]))
        self._perturb = jax.jit(self._perturb_returns)
        self._progress = jax.jit(lambda batch, key: jax.vmap(jax.vmap(
            lambda st, y, k: step_progress(env, env_params, st, y, k)[0]))(
                batch.states, batch.responses, jax.random.split(key, batch.turn_mask.shape))
            & batch.turn_mask)
        self._eligible = jax.jit(fj.perturbable_actions)

    def progress(self, batch, key):
        """[B, T] bool (numpy): the action made progress, judged by the environment
        (factor_jax.hindsight.progress.step_progress: as good as the scripted expert's
        step), not by its feedback's text."""
        return np.asarray(self._progress(batch, key))

    def mc_credit(self, params, batch, pieces, key) -> Dict[str, np.ndarray]:
        """Panel (b)'s Monte-Carlo references [B, T] (numpy; V 0 at t = 0 and on padding),
        both from the same M rollouts per state x_t, t >= 1:

        fj.mc_references: "a_mc", "v_mc" in TAC's coordinate (the panel's reference: an
        exact critic gives A* = A^MC), "a_mc_env", "v_mc_env" in the environment's (the
        reference before issue 38), "var", "var_env", "var_est", "unscored"."""
        tm = np.asarray(batch.turn_mask)
        bi, ti = np.nonzero(tm & (np.arange(tm.shape[1])[None] >= 1))
        n = len(bi)
        out = {f: np.zeros(tm.shape, np.float32) for f in ("outcome", "ret", "outcome_var")}
        out["scored"] = np.ones(tm.shape, bool)
        if n:
            n_pad = _pad_idx(n, self.mc_states_per_chunk)
            bi_p = np.concatenate([bi, np.full(n_pad - n, bi[0])])
            ti_p = np.concatenate([ti, np.full(n_pad - n, ti[0])])
            states = _take(batch.states, bi_p, ti_p)
            rew = np.where(tm, np.asarray(batch.rewards), 0.0)
            prefix = (np.cumsum(rew, axis=1) - rew)[bi_p, ti_p]       # return before x_t
            keys = jax.random.split(key, n_pad)
            so = self._mc(params, states, keys, jnp.asarray(prefix))
            for f in out:
                out[f][bi, ti] = np.asarray(getattr(so, f))[:n]
        return {k: np.asarray(v) for k, v in self._references(batch, pieces, out).items()}

    def _perturb_returns(self, params, states, actions, hi, lo, cands, legal, keys):
        var = fj.perturbed_actions(actions, hi, lo, cands, legal, self.modes, self.filler,
                                   UNK_ID)
        return fj.perturbation_returns(self.env, self.env_params,
                                       state_actor(self.ctx, params), states, var, keys,
                                       self.chunk)

    def select_actions(self, batch, pieces, seed):
        """Host: up to perturb_actions eligible actions of each credit sign (random)."""
        pos, neg, hi, lo = (np.asarray(x) for x in self._eligible(
            pieces.credit, pieces.weights, pieces.alloc_mask, self.min_abs_credit))
        rng = np.random.default_rng(seed)
        chosen = {}
        for name, sel in (("pos", pos), ("neg", neg)):
            bi, ti = np.nonzero(sel)
            take = rng.permutation(len(bi))[: self.perturb_actions]
            chosen[name] = (bi[take], ti[take])
        return chosen, hi, lo

    def perturbation(self, params, batch, pieces, key, seed) -> Dict[str, Any]:
        """Panel (c): the return-change table (experiments/tables/factor_fig5.py's docstring)."""
        chosen, hi, lo = self.select_actions(batch, pieces, seed)
        bi = np.concatenate([chosen["pos"][0], chosen["neg"][0]])
        ti = np.concatenate([chosen["pos"][1], chosen["neg"][1]])
        n_pos, n = len(chosen["pos"][0]), len(bi)
        out: Dict[str, Any] = {"n_pos": n_pos, "n_neg": n - n_pos, "modes": self.modes}
        if n == 0:
            return out
        n_pad = 2 * self.perturb_actions  # one compiled shape
        bi_p = np.concatenate([bi, np.full(n_pad - n, bi[0])])
        ti_p = np.concatenate([ti, np.full(n_pad - n, ti[0])])
        keys = jax.random.split(key, n_pad * self.R).reshape(n_pad, self.R)
        ret, changed = self._perturb(params, _take(batch.states, bi_p, ti_p),
                                     jnp.asarray(np.asarray(batch.responses)[bi_p, ti_p]),
                                     jnp.asarray(hi[bi_p, ti_p]), jnp.asarray(lo[bi_p, ti_p]),
                                     jnp.asarray(np.asarray(batch.cand_tokens)[bi_p, ti_p]),
                                     jnp.asarray(np.asarray(batch.cand_mask)[bi_p, ti_p]), keys)
        ret, changed = np.asarray(ret)[:n], np.asarray(changed)[:n]
        delta = (ret[:, 1:] - ret[:, :1]).mean(-1)  # [n, V-1] per-action mean change
        credit = np.asarray(pieces.credit)[bi, ti]
        # A token with log pi_old = 0 had a single allowed continuation (forced: structure
        # words shared by every candidate, EOS): its hindsight delta is 0.
        logp = np.asarray(batch.logp_old)[bi, ti]
        forced = {"high": logp[np.arange(n), hi[bi, ti]] == 0.0,
                  "low": logp[np.arange(n), lo[bi, ti]] == 0.0}
        table = {}
        for m, mode in enumerate(self.modes):
            for w, which in enumerate(("high", "low")):
                v = 2 * m + w
                for sign, rows in (("pos", slice(0, n_pos)), ("neg", slice(n_pos, n))):
                    d = delta[rows, v]
                    k = len(d)
                    table[f"{mode}/{which}/{sign}"] = {
                        "mean": float(d.mean()) if k else float("nan"),
                        "se": float(d.std(ddof=1) / np.sqrt(k)) if k > 1 else float("nan"),
                        "n": k,
                        "changed_frac": float(changed[rows, v + 1].mean()) if k else float("nan"),
                        "forced_token_frac": (float(forced[which][rows].mean()) if k
                                              else float("nan")),
                    }
        out.update(table=table, credit_mean_pos=float(credit[:n_pos].mean()) if n_pos else None,
                   credit_mean_neg=float(credit[n_pos:].mean()) if n > n_pos else None,
                   original_return_mean=float(ret[:, 0].mean()),
                   rollouts_per_action=self.R)
        return out
