"""ASCT and VinePPO as credit methods (`Method` records, see asct_jax.rl.credit).

asct_uniform / asct_uct / asct_agentuct (docs/methods.md, ASCT), per training iteration:
  1. the rollout of pi_old is the batch (every visited state s_t is stored);
  2. `asct.states_per_episode` visited turns per episode (all real turns if larger than
     the episode) are chosen uniformly; a tree of `asct.num_simulations` simulations is
     searched from each with the variant's selection rule;
  3. Q(s_t, a) = mean backed-up return through root action a (masked where unvisited);
  4. Q'(s, a) = centre_q(Q, mode=asct.centring)   (default Q - alpha log pi_old(a|s));
  5. A_t = Q'(s_t, a_t) - V_phi(s_t); unsearched turns, unvisited or non-restorable taken
     actions fall back to the trajectory-return advantage G_t - V_phi(s_t) (counted).
  The critic keeps its own target, the return-to-go. Auxiliary tokens: every action
  executed inside the search (tree steps and leaf rollouts), summed over the batch.
  The search sees returns from s_t on: Q(s_t, a) estimates r_t + future rewards.

vineppo (workflow-adapted VinePPO): V_hat(s_t) = mean return of `vineppo.k` rollouts of
pi_old from every visited state s_t, V_hat(terminal) = 0,
A_t = r_t + V_hat(s_{t+1}) - V_hat(s_t). Its auxiliary tokens are those rollouts' tokens.

asct_factor (ASCT's A_t with FACTOR's token allocation) lives in factor_jax.methods, the
package that depends on both.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from asct_jax.infra.checks import Range
from asct_jax.infra.typed_config import from_section, option
from asct_jax.rl import advantages as adv
from asct_jax.rl.credit import (CreditContext, Method, any_over_seeds, from_turn_advantages,
                                state_policy_fn, turn_states, value_targets_mc)
from asct_jax.rl.types import Rollout
from asct_jax.rl.types import merge_batch_turns as _flat
from asct_jax.search.credit import CENTRE_MODES, asct_advantage, centre_q
from asct_jax.search.rollout_value import mc_return
from asct_jax.search.search import CHARGES, LEAF_EVALS, make_search_config, search
from asct_jax.search.selection import linear_schedule, make_selection


@dataclasses.dataclass(frozen=True)
class SearchFields:
    """The tree search's fields (section asct.search): the SearchConfig's and the
    selection rule's hyperparameters (c, beta)."""

    num_simulations: int = option(Range(1, None, integer=True), "simulations per tree")
    max_depth: int = option(Range(1, None, integer=True), "edges from the root, at most")
    c: float = option(Range(0.0, None), "exploration constant of UCT / AgentUCT")
    beta: float = option(Range(0.0, None), "AgentUCT cost weight (the schedule's end)")
    leaf_eval: str = option(tuple(LEAF_EVALS), "how a leaf is valued")
    num_leaf_rollouts: int = option(Range(1, None, integer=True), "rollouts per leaf")
    charge: str = option(tuple(CHARGES), "how tree steps are charged")

    def as_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ASCTConfig:
    """ASCT's fields (section asct; the selection rule comes from the method name)."""

    states_per_episode: int = option(Range(1, None, integer=True),
                                     "visited states searched per episode")
    centring: str = option(CENTRE_MODES, "how Q is centred by pi_old")
    alpha: float = option(None, "weight of log pi_old in the logpi centring")
    beta_start: float = option(Range(0.0, None), "AgentUCT cost weight at step 0")
    beta_steps: int = option(Range(0, None, integer=True), "steps of the beta schedule")
    search: SearchFields = option(None, "the tree search (asct.search)")


@dataclasses.dataclass(frozen=True)
class VinePPOConfig:
    """VinePPO's fields (section vineppo)."""

    k: int = option(Range(1, None, integer=True), "Monte-Carlo rollouts per visited state")


def asct_config(config) -> ASCTConfig:
    """ASCTConfig of config.asct (ConfigError naming asct.<field> on a bad value)."""
    return from_section(ASCTConfig, config, "asct",
                        search=from_section(SearchFields, config, "asct.search"))


def choose_turns(turn_mask, key, num: int):
    """`num` distinct real turns per episode, uniformly (Gumbel top-k): ([B, S], [B, S])."""
    t = turn_mask.shape[1]
    num = min(num, t)
    g = jax.random.gumbel(key, turn_mask.shape)
    score = jnp.where(turn_mask, g, -jnp.inf)
    _, idx = jax.lax.top_k(score, num)
    valid = jnp.take_along_axis(turn_mask, idx, axis=1)
    return idx, valid


def searched_advantages(ac: ASCTConfig, ctx: CreditContext, params, batch: Rollout, key,
                        step, rule: str):
    """A_t [B, T] from searches rooted at chosen visited states, plus cost metrics."""
    b, t = batch.turn_mask.shape
    k_turns, k_search = jax.random.split(key)
    idx, valid = choose_turns(batch.turn_mask, k_turns, ac.states_per_episode)  # [B, S]
    s = idx.shape[1]
    roots = jax.tree.map(_flat, turn_states(batch, idx))
    scfg = make_search_config(ac.search.as_dict())
    beta = linear_schedule(step, ac.beta_start, ac.search.beta, ac.beta_steps)
    selection_fn = make_selection(rule, ac.search.as_dict(), beta=beta)
    out = search(ctx.env, ctx.env_params, roots, state_policy_fn(ctx, params), k_search,
                 selection_fn, scfg)
    q_c = centre_q(out.q, out.q_mask, out.prior_logp, ac.centring, ac.alpha)
    # Scatter the S searched rows back to their turns: [B, S, K] -> [B, T, K].
    onehot = jax.nn.one_hot(idx, t, dtype=jnp.float32) * valid[..., None]  # [B, S, T]
    kk = q_c.shape[-1]
    q_bt = jnp.einsum("bst,bsk->btk", onehot, q_c.reshape(b, s, kk))
    mask_bt = jnp.einsum("bst,bsk->btk", onehot, out.q_mask.reshape(b, s, kk)
                         .astype(jnp.float32)) > 0
    searched = jnp.einsum("bst->bt", onehot) > 0
    g = adv.returns_to_go(batch.rewards, batch.turn_mask)
    fallback = g - batch.values
    a, used_fallback = asct_advantage(q_bt, mask_bt, batch.action_index, batch.values,
                                      fallback, searched, batch.turn_mask)
    vflat = valid.reshape(-1)
    metrics = {
        "aux_tokens": jnp.sum(jnp.where(vflat, out.aux_tokens, 0.0)),
        "env_calls": jnp.sum(jnp.where(vflat, out.env_calls, 0)).astype(jnp.float32),
        "asct/fallback_frac": jnp.sum(used_fallback) / jnp.maximum(jnp.sum(batch.turn_mask), 1),
        "asct/searched_states": jnp.sum(valid).astype(jnp.float32),
        "asct/beta": jnp.asarray(beta, jnp.float32),
    }
    return a, metrics


def _asct_factory(rule: str):
    def factory(cfg: ASCTConfig, ctx: CreditContext):
        def credit(params, batch: Rollout, key, step, mstate=None):
            a, metrics = searched_advantages(cfg, ctx, params, batch, key, step, rule)
            return from_turn_advantages(batch, a, value_targets_mc(batch), metrics)
        return credit
    return factory


def live_state_values(ctx: CreditContext, params, batch: Rollout, key, num_rollouts: int,
                      chunk: int):
    """V_hat(s_t) = mean return of `num_rollouts` pi_old rollouts from every real turn.

    The B*T stored states are sorted live-first and processed in chunks of `chunk` states
    (lax.map); a chunk with no live state is skipped by lax.cond, so the cost follows the
    number of real turns, not B * T.
    Returns (v_hat [B, T] (0 on padding), aux_tokens [], env_calls []).
    """
    b, t = batch.turn_mask.shape
    n = b * t
    n_chunks = -(-n // chunk)
    pad = n_chunks * chunk - n
    live = jnp.concatenate([batch.turn_mask.reshape(-1), jnp.zeros((pad,), bool)])
    order = jnp.argsort(~live, stable=True)  # live states first
    states = jax.tree.map(lambda x: jnp.concatenate(
        [_flat(x), jnp.repeat(_flat(x)[:1], pad, axis=0)])[order], batch.states)
    keys = jax.random.split(key, n_chunks * chunk)[order]  # key i stays with state i
    policy_fn = state_policy_fn(ctx, params)
    per_state = jax.vmap(lambda st, kk: mc_return(ctx.env, ctx.env_params, st, policy_fn, kk,
                                                  num_rollouts))

    def one_chunk(xs):
        st, kk, lv = xs
        zeros = (jnp.zeros((chunk,)), jnp.zeros((chunk, num_rollouts)), jnp.zeros((chunk,)),
                 jnp.zeros((chunk,), jnp.int32))
        out = jax.lax.cond(any_over_seeds(lv, ctx), lambda: per_state(st, kk),
                           lambda: zeros)
        return out[0], jnp.where(lv, out[2], 0.0), jnp.where(lv, out[3], 0)

    split = lambda x: x.reshape((n_chunks, chunk) + x.shape[1:])  # noqa: E731
    v, aux, calls = jax.lax.map(one_chunk, (jax.tree.map(split, states), split(keys),
                                            split(live[order])))
    v = jnp.zeros((n_chunks * chunk,)).at[order].set(v.reshape(-1))[:n].reshape(b, t)
    return (jnp.where(batch.turn_mask, v, 0.0), jnp.sum(aux),
            jnp.sum(calls).astype(jnp.float32))


def _vineppo(cfg: VinePPOConfig, ctx: CreditContext):
    k = cfg.k

    def credit(params, batch: Rollout, key, step, mstate=None):
        v_hat, aux, calls = live_state_values(ctx, params, batch, key, k,
                                              chunk=batch.turn_mask.shape[0])
        a = adv.vineppo_advantages(batch.rewards, v_hat, batch.turn_mask)
        metrics = {"aux_tokens": aux, "env_calls": calls}
        return from_turn_advantages(batch, a, value_targets_mc(batch), metrics)
    return credit


VINEPPO = Method("vineppo", _vineppo, restores_states_in_step=True, normalise="standardise",
                 make_config=functools.partial(from_section, VinePPOConfig, section="vineppo"))
def _asct_method(name: str, rule: str) -> Method:
    return Method(name, _asct_factory(rule), make_config=asct_config,
                  restores_states_in_step=True, normalise="standardise")


ASCT_UNIFORM = _asct_method("asct_uniform", "uniform")
ASCT_UCT = _asct_method("asct_uct", "uct")
ASCT_AGENTUCT = _asct_method("asct_agentuct", "agentuct")
METHODS = (VINEPPO, ASCT_UNIFORM, ASCT_UCT, ASCT_AGENTUCT)
