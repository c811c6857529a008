"""The hindsight phase's rows for the generating actor (warm_start.phase "feedback" or
"counterfactual" with actor.chooser "generate"; factor_jax.hindsight.warm_start keeps the
rows, their targets, the row sampling and the update, factor_jax.hindsight.progress the
progress rule).

The generating actor reads its prompt p_t (asct_jax.rl.generation.build_prompt) and writes
a response; its teacher reads teacher_prefix(p_t, o) (factor_jax.hindsight.teacher_prompt;
FACTOR's teacher in generate mode, factor_jax.teacher) and scores a response. A target
candidate c of the rows is here the canonical response the SFT phase teaches,

    r(c) = "<think> </think> <action> c </action> EOS"   (generation.canonical_response),

and the rows' losses are over its tokens (`response_loss`, `student_kl`):

  toward c:    -sum_j log pi(r_j | prefix, r_<j) over r(c)'s real tokens (format, action
               and end of turn: the whole response SFT teaches);
  away from c: -log(1 - pi(c)), pi(c) = prod_j pi(c_j | prefix, "<think> </think>
               <action>", c_<j) over c's action tokens only (strictly inside the action
               tags; the format tokens are every valid response's, not c's);
  student:     sum_j KL(pi_SFT(. | p_t, r_<j) || pi(. | p_t, r_<j)) over the full
               vocabulary along the taken turn's canonical response r(y_t) (teacher
               forcing), pi_SFT's distributions computed once before the phase
               (`student_distributions`).

Away on the action's sequence probability, not per token: the candidates rows' rule, and
it saturates once c as a whole is unlikely, so the tokens c shares with a right action
(shop's "click", "buy") are not pushed down further. Computed exactly, with no clamp, from
the first-deviation split 1 - prod_j p_j = sum_j prod_{i<j} p_i (1 - p_j), each
log(1 - p_j) a logsumexp over the other vocabulary entries (`away_log1m`).

The environment steps candidates as its own tokens (progress, the counterfactual
candidates: `env_responses`), and the rows' targets are their canonical responses, so
"counterfactual" needs nothing of its own here.

Shapes: N rows, M flat turns, K candidates, A the environment's action length, R' = A + 5
(A + 3 without the think part) the canonical response's, V the vocabulary, P the prompt.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from asct_jax.infra.checks import ConfigError
from asct_jax.rl.generation import GenerationSpec

STUDENT_CHUNK = 256      # rows per pass of the SFT actor's distributions (memory)


def canonical_len(spec: GenerationSpec, action_len: int) -> int:
    """R': the tokens of canonical_response for an action of action_len tokens."""
    t = spec.tags
    think = len(t.think_open + t.think_close) if spec.think == "required" else 0
    return think + len(t.action_open) + action_len + len(t.action_close) + 1


def check_response_len(spec: GenerationSpec, action_len: int, hindsight: str) -> None:
    """ConfigError (one line) if a response cannot hold the canonical one the rows teach."""
    need = canonical_len(spec, action_len)
    if spec.response_len < need:
        raise ConfigError("actor.response_len", f"{spec.response_len} with warm_start."
                          f"hindsight {hindsight!r} (the canonical response has {need} "
                          "tokens)", f">= {need}, or warm_start.phase 'none'")


def env_responses(cand_tokens: chex.Array, action_index: chex.Array) -> chex.Array:
    """[..., A]: the taken candidate's environment tokens (what the projection sent),
    candidate 0's where no candidate was taken (index -1). cand_tokens [..., K, A]."""
    i = jnp.maximum(action_index, 0)[..., None, None]
    return jnp.take_along_axis(cand_tokens, i, axis=-2)[..., 0, :]


def action_token_mask(resp: chex.Array, spec: GenerationSpec, pad_id: int) -> chex.Array:
    """[N, R'] bool: the action tokens (strictly inside the action tags) of canonical
    responses resp [N, R'] (head, c's real tokens, tail, then PAD)."""
    t = spec.tags
    head = len(t.think_open + t.think_close if spec.think == "required" else ()) \
        + len(t.action_open)
    tail = len(t.action_close) + 1
    pos = jnp.arange(resp.shape[-1])[None, :]
    n_real = jnp.sum(resp != pad_id, -1, keepdims=True)
    return (pos >= head) & (pos < n_real - tail)


def log1m_token(dist_logp: chex.Array, support: chex.Array, token: chex.Array
                ) -> chex.Array:
    """A DistReduce fn (policy.DistReduce; rows as [c, V, 1]): log(1 - p(token)) =
    logsumexp of the log-probs of every other entry, exact where p(token) -> 1.
    dist_logp, support [c, V, 1], token [c, 1] -> [c, 1]."""
    other = support & (jnp.arange(dist_logp.shape[-2])[None, :, None] != token[:, None, :])
    return jax.nn.logsumexp(jnp.where(other, dist_logp, -jnp.inf), axis=-2)


def away_log1m(logp: chex.Array, log1m: chex.Array, mask: chex.Array) -> chex.Array:
    """[N] log(1 - prod_{j in mask} p_j) = logsumexp_j (sum_{i<j} log p_i + log(1 - p_j))
    over the masked positions (first deviation at j); 0 for a row without any.
    logp, log1m: [N, R'] log p_j, log(1 - p_j); mask [N, R'] bool."""
    lp = jnp.where(mask, logp, 0.0)
    before = jnp.cumsum(lp, -1) - lp                                  # sum_{i<j} log p_i
    terms = jnp.where(mask, before + jnp.where(mask, log1m, 0.0), 0.0)
    some = jnp.any(mask, -1, keepdims=True)
    first = jnp.arange(mask.shape[-1])[None, :] == 0
    out = jax.nn.logsumexp(terms, axis=-1, b=jnp.where(some, mask, first).astype(terms.dtype))
    return jnp.where(some[:, 0], out, 0.0)


def response_loss(policy, params, prefix: chex.Array, resp: chex.Array, away: chex.Array
                  ) -> chex.Array:
    """Mean over rows of -log pi(r(c)) (toward) or -log(1 - pi(c)) (away; module
    docstring) of canonical responses resp [N, R'] after prefix [N, .]; away [N] bool.
    One pass (policy.action_outputs, log(1 - p_j) its DistReduce)."""
    out = policy.action_outputs(params, prefix, resp, dist_reduce=(log1m_token, resp))
    real = resp != policy.pad_id
    toward = -jnp.sum(jnp.where(real, out.logp, 0.0), -1)
    off = -away_log1m(out.logp, out.reduced,
                      action_token_mask(resp, policy.spec, policy.pad_id) & real)
    return jnp.mean(jnp.where(away, off, toward))


def _kl_reduce(dist_logp, support, sft_logp):
    """A DistReduce fn: KL(pi_SFT || pi) of one position, rows as [c, V, 1] -> [c, 1]."""
    return jnp.sum(jnp.where(support, jnp.exp(sft_logp) * (sft_logp - dist_logp), 0.0), -2)


def student_kl(policy, params, prompt: chex.Array, resp: chex.Array, sft_logp: chex.Array
               ) -> chex.Array:
    """Mean over rows of sum_j KL(pi_SFT || pi) at resp's real positions (teacher forcing
    after the actor's prompt [N, P]); sft_logp [N, R', V] (student_distributions)."""
    out = policy.action_outputs(params, prompt, resp, dist_reduce=(_kl_reduce, sft_logp))
    return jnp.mean(jnp.sum(jnp.where(resp != policy.pad_id, out.reduced, 0.0), -1))


def _chunk(m: int, most: int) -> int:
    """The largest divisor of m that is at most `most`."""
    return max(d for d in range(1, min(m, most) + 1) if m % d == 0)


def student_distributions(policy, params, prompt: chex.Array, resp: chex.Array
                          ) -> chex.Array:
    """[M, R', V] float32: the actor's (params') log-softmax at each position of resp
    [M, R'] after its prompt [M, P] (teacher forcing), STUDENT_CHUNK rows at a time
    (a lax.map over equal chunks). Jittable (policy static)."""
    m = prompt.shape[0]
    c = _chunk(m, STUDENT_CHUNK)
    split = lambda x: x.reshape((m // c, c) + x.shape[1:])  # noqa: E731
    dist = jax.lax.map(lambda a: policy.distributions(params, a[0], a[1])[1],
                       (split(prompt), split(resp)))
    return dist.reshape((m,) + dist.shape[2:])


def taken_responses(cands: chex.Array, taken: chex.Array) -> chex.Array:
    """[N, R']: the taken candidate's canonical response; cands [N, K, R'], taken [N]."""
    return jnp.take_along_axis(cands, jnp.maximum(taken, 0)[:, None, None], axis=1)[:, 0]
