"""The counterfactual rows of the hindsight warm start (warm_start.phase
"counterfactual", factor_jax.hindsight.warm_start): rows where the feedback alone decides
the target at the same x_t.

At a stored turn x_t, C candidates are stepped from the stored state (the expert's a*_t
and C - 1 others drawn without replacement from the legal ones), each keeping its real
feedback o_c and its progress (the rule of `step_progress`, factor_jax.hindsight.progress:
as good as the scripted expert's step). The row

  counterfactual:  [x_t | o_c] -> c if c made progress, else away from c (-log(1 - pi(c)))

so the same prompt prefix x_t appears with different feedbacks and different targets.
Away from c rather than toward a*_t: toward a*_t at every unsuccessful c is a function of
x_t whatever o_c says (the trap of the real row off the expert's path,
docs/results/regime.md); away from c is what o_c shows. Where the state cannot tell
which candidate works (household's hidden target: "go to" the place that holds it is
the expert's step, the others find nothing), only o_c can.

Shapes: M flat turns, C counterfactual candidates per turn, K candidates, A / F action and
feedback lengths.
"""
from __future__ import annotations

from typing import Tuple

import chex
import jax
import jax.numpy as jnp

from factor_jax.hindsight.progress import candidate_progress

CANDIDATES = 4      # C: candidates stepped per turn (a*_t and 3 drawn from the legal ones)


def draw_candidates(key, legal, expert, num: int = CANDIDATES
                    ) -> Tuple[chex.Array, chex.Array]:
    """(index [M, C] i32, valid [M, C] bool): a*_t first, then C - 1 distinct legal
    candidates other than a*_t drawn uniformly without replacement (Gumbel top-k); a slot
    with no such candidate left (fewer legal ones) is not valid. legal [M, K], expert [M]."""
    m, k = legal.shape
    others = legal & (jnp.arange(k)[None, :] != expert[:, None])
    g = jax.random.gumbel(key, (m, k))
    score, drawn = jax.lax.top_k(jnp.where(others, g, -jnp.inf), min(num - 1, k))
    index = jnp.concatenate([expert[:, None], drawn], 1).astype(jnp.int32)
    expert_legal = jnp.take_along_axis(legal, expert[:, None], axis=1)
    valid = jnp.concatenate([expert_legal, jnp.isfinite(score)], 1)
    return index, valid


def counterfactual_fields(env, env_params, states, cands, legal, expert, key,
                          teacher: str = "expert", num: int = CANDIDATES) -> dict:
    """HindsightTurns' counterfactual fields over M flat turns (states [M, ...], cands
    [M, K, A], legal [M, K], expert [M]): cf_index [M, C], cf_valid [M, C], cf_feedback
    [M, C, F], cf_progress [M, C] (False where not valid). Jittable (env, teacher, num
    static)."""
    k_draw, k_step = jax.random.split(key)
    index, valid = draw_candidates(k_draw, legal, expert, num)
    responses = jnp.take_along_axis(cands, index[:, :, None], axis=1)      # [M, C, A]
    progress, feedback = jax.vmap(
        lambda s, r, k: candidate_progress(env, env_params, s, r, k, teacher))(
        states, responses, jax.random.split(k_step, index.shape[0]))
    return dict(cf_index=index, cf_valid=valid, cf_feedback=feedback,
                cf_progress=progress & valid)


def counterfactual_targets(progress) -> Tuple[chex.Array, chex.Array]:
    """(toward [..] bool, away [..] bool) of the counterfactual row for candidates whose
    step made `progress` (bool [..]): toward c if it did, else away from c."""
    return progress, ~progress


def sample_counterfactual(key, idx, cf_index, cf_valid, cf_feedback, cf_progress, cands
                          ) -> dict:
    """One valid counterfactual candidate per sampled turn idx [N], uniform over the valid
    slots other than a*_t's (slot 0, drawn only where no other is valid; a*_t's own row
    is the real row's, a function of x_t): its feedback [N, F], its action tokens [N, A]
    (the target: c itself), away [N] (c made no progress) and its index cf_candidate [N].
    cands [M, K, A]."""
    valid = cf_valid[idx]                                                  # [N, C]
    other = valid & (jnp.arange(valid.shape[1]) > 0)[None, :]
    valid = jnp.where(jnp.any(other, 1, keepdims=True), other, valid)     # a*_t: no other
    slot = jax.random.categorical(key, jnp.where(valid, 0.0, -jnp.inf))    # [N]
    pick = lambda x: jnp.take_along_axis(x[idx], slot[:, None], axis=1)[:, 0]  # noqa: E731
    c = pick(cf_index)
    _, away = counterfactual_targets(pick(cf_progress))
    return {"cf_feedback": jnp.take_along_axis(cf_feedback[idx], slot[:, None, None],
                                               axis=1)[:, 0],
            "counterfactual_action": jnp.take_along_axis(cands[idx], c[:, None, None],
                                                         axis=1)[:, 0],
            "counterfactual_away": away, "cf_candidate": c}
