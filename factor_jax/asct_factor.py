"""ASCT + FACTOR as a credit method (a `Method` record, see asct_jax.rl.credit;
docs/methods.md, ASCT + FACTOR): ASCT-AgentUCT's searched A_t as "how much", FACTOR's
HTA + APM as "where" among the action's tokens (its teacher pi_old, its eta schedule).
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

import factor_jax as fj
from asct_jax.rl import advantages as adv
from asct_jax.rl.credit import CreditContext, Method, installs_credit_state, value_targets_mc
from asct_jax.rl.types import Credit, Rollout, action_tokens, nonaction_tokens
from asct_jax.rl.methods import ASCT
from asct_jax.search.cache import init_cache, new_iteration
from asct_jax.search.methods import ASCTConfig, asct_config, ledger_chat, searched_advantages
from factor_jax.methods import FactorConfig, Schedule, factor_config
from factor_jax.teacher import teacher_log_probs


@dataclasses.dataclass(frozen=True)
class AsctFactorConfig:
    """asct_factor's fields: ASCT's search (section asct) and FACTOR's allocation (factor)."""

    asct: ASCTConfig
    factor: FactorConfig


def asct_factor_config(config) -> AsctFactorConfig:
    return AsctFactorConfig(asct=asct_config(config), factor=factor_config(config))


def _asct_factor(cfg: AsctFactorConfig, ctx: CreditContext):
    """ASCT-AgentUCT's A_t as the action credit, HTA + APM (factor_jax.hta_scores,
    apm_weights with FACTOR's eta schedule) as the token allocation among the action's
    tokens, mean_j C_{t,j} = A_t per action; a written turn's other tokens keep A_t. The
    search keeps asct_agentuct's execution cache and token ledger (its state), so the two
    rows spend the same budget."""
    fc, use_cache = cfg.factor, cfg.asct.cache
    sched = Schedule.of(fc, critic=False)   # no critic to warm up
    chat = ledger_chat(cfg.asct.actor_token_unit, ctx)

    def credit(params, batch: Rollout, key, step, mstate=None):
        a, cache, metrics = searched_advantages(
            cfg.asct, ctx, params, batch, key, step, "agentuct",
            cache=new_iteration(mstate) if use_cache else None, chat=chat)
        teacher = teacher_log_probs(ctx, params, batch, fc.teacher_prompt)
        delta = fj.hindsight_delta(teacher, batch.logp_old, batch.token_mask)
        eta = sched.eta(jnp.asarray(step, jnp.int32) + 1, fc.eta0)
        mask = action_tokens(batch)
        scores = fj.hta_scores(delta, a, mask, fc.clip_d)
        weights = fj.apm_weights(scores, mask, eta, tau=fc.tau)
        # The rest of a written turn (the reasoning outside the action tags) keeps A_t, as
        # AgentUCT's broadcast gives it, so the two rows differ only in "where" among the
        # action's tokens (and ASCT's standardisation sees a_t = A_t per decision).
        rest = adv.broadcast_to_tokens(a, nonaction_tokens(batch))
        coef = fj.token_coefficients(a, weights, mask) + rest
        return Credit(coef=coef, value_targets=value_targets_mc(batch),
                      metrics={**metrics, **allocation_metrics(weights, mask, eta)},
                      state=cache if use_cache else mstate)
    return credit


def allocation_metrics(weights, mask, eta):
    """Whether "where" is live: eta, the share of actions with >= 2 action tokens, the
    mean |omega - 1| over their tokens, the largest conservation error (APM: 0).
    weights, mask: [B, T, A] (omega, the action tokens)."""
    length = jnp.sum(mask, axis=-1)
    multi = length >= 2
    spread = jnp.where(mask & multi[..., None], jnp.abs(weights - 1.0), 0.0)
    return {"factor/eta": jnp.asarray(eta, jnp.float32),
            "factor/multi_token_share": jnp.sum(multi) / jnp.maximum(jnp.sum(length > 0), 1),
            "factor/weight_spread": jnp.sum(spread) / jnp.maximum(
                jnp.sum(mask & multi[..., None]), 1),
            "factor/conservation_err_max": jnp.max(fj.conservation_error(weights, mask))}


def _cache_init(cfg: AsctFactorConfig, ctx: CreditContext, params, key):
    return init_cache(ctx.env, ctx.env_params) if cfg.asct.cache else None


ASCT_FACTOR = Method("asct_factor", _asct_factor, protocol=ASCT,
                     make_config=asct_factor_config, restores_states_in_step=True,
                     init_state=_cache_init, update_state=installs_credit_state)
METHODS = (ASCT_FACTOR,)
