"""The language-model policy over candidate actions: constrained decoding, scoring, value.

The actor reads x_t (observation tokens [O]) and writes an action of A tokens. Decoding is
constrained to the environment's legal candidates (a prefix trie over cands [K, A]): at
token j the allowed set is

    Allowed_j = { cands[k, j] : legal_k and cands[k, <j] == y_<j }

and pi(y_j | x, y_<j) = softmax over Allowed_j of the decoder's logits. Sampling the tokens
one by one from these distributions is the same as sampling a candidate k with probability

    pi(a_k | x) = prod_j pi(cands[k, j] | x, cands[k, <j]),

so the rollout scores all K candidates in one batched forward and samples an index, and
the per-token log-probs it keeps are exactly those of token-level constrained decoding.
Tokens with a single allowed continuation (forced filler) get log-prob 0.

Sequences fed to the decoder are [obs (left-padded) | action]: the logits at position
O - 1 + j predict action token j, and the value head reads the hidden state at O - 1.
The hindsight teacher reads [obs | SEP feedback | action] (feedback = o_{t+1}).

All functions are pure in (params, arrays); `Policy` only holds the static graph.
"""
from __future__ import annotations

from typing import Tuple

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from asct_jax.envs.base import PAD_ID, SEP_ID
from asct_jax.models.cache import init_cache

NEG_INF = -1e9


def left_align(tokens: chex.Array) -> chex.Array:
    """Moves PAD to the left of each row: [..., L] right-padded -> left-padded."""
    length = tokens.shape[-1]
    n_real = jnp.sum(tokens != PAD_ID, axis=-1, keepdims=True)
    idx = (jnp.arange(length) + n_real) % length
    # Row i: position p holds tokens[(p + n_real) % L]; for right-padded rows this puts
    # the n_real real tokens at the end, in order, with PAD before them.
    return jnp.take_along_axis(tokens, jnp.broadcast_to(idx, tokens.shape), axis=-1)


def allowed_tokens(actions: chex.Array, cands: chex.Array, legal: chex.Array,
                   vocab_size: int) -> chex.Array:
    """The constrained-decoding trie mask.

    Args:
      actions: [A] int32, the action being decoded (its prefix defines the trie node).
      cands: [K, A] int32 candidate actions; legal: [K] bool.
    Returns:
      [A, V] bool: allowed[j, v] iff some legal candidate k has cands[k, <j] == actions[<j]
      and cands[k, j] == v (Allowed_j above). PAD is never allowed (actions end at EOS).
    """
    chex.assert_rank([actions, cands, legal], [1, 2, 1])
    same = cands == actions[None, :]  # [K, A]
    # prefix_ok[k, j] = all(cands[k, :j] == actions[:j])
    prefix_ok = jnp.cumprod(jnp.concatenate(
        [jnp.ones_like(same[:, :1]), same[:, :-1]], axis=1).astype(jnp.int32), axis=1) > 0
    live = prefix_ok & legal[:, None] & (cands != PAD_ID)  # [K, A]
    onehot = jax.nn.one_hot(cands, vocab_size, dtype=jnp.bool_)  # [K, A, V]
    return jnp.any(onehot & live[:, :, None], axis=0)


def constrained_log_probs(logits: chex.Array, allowed: chex.Array,
                          tokens: chex.Array) -> Tuple[chex.Array, chex.Array]:
    """log pi(y_j | .) and entropy of the constrained distribution at each position.

    Args: logits [A, V], allowed [A, V] bool, tokens [A]. Returns ([A], [A]); positions with
    no allowed token (after the action ended) give 0 for both.
    """
    masked = jnp.where(allowed, logits, NEG_INF)
    logp_all = jax.nn.log_softmax(masked, axis=-1)
    any_allowed = jnp.any(allowed, axis=-1)
    logp = jnp.take_along_axis(logp_all, tokens[:, None], axis=-1)[:, 0]
    p = jnp.where(allowed, jnp.exp(logp_all), 0.0)
    entropy = -jnp.sum(p * jnp.where(allowed, logp_all, 0.0), axis=-1)
    return jnp.where(any_allowed, logp, 0.0), jnp.where(any_allowed, entropy, 0.0)


class Policy:
    """Static wrapper: graphdef of the decoder plus sizes. Params are passed explicitly."""

    def __init__(self, graphdef, vocab_size: int, obs_len: int, action_len: int,
                 feedback_len: int):
        self.graphdef = graphdef
        self.vocab_size = vocab_size
        self.obs_len = obs_len
        self.action_len = action_len
        self.feedback_len = feedback_len

    # -- decoder passes -------------------------------------------------------------
    def _run(self, params, prefix: chex.Array, actions: chex.Array):
        """prefix [N, P] right-padded, actions [N, A] -> (action logits [N,A,V], value [N])."""
        model = nnx.merge(self.graphdef, params)
        prefix = left_align(prefix)
        ids = jnp.concatenate([prefix, actions], axis=1)
        mask = jnp.concatenate([prefix != PAD_ID, jnp.ones_like(actions, bool)], axis=1)
        logits, hidden, _ = model.forward(ids, attention_mask=mask)
        p = prefix.shape[1]
        action_logits = logits[:, p - 1:p - 1 + actions.shape[1]]
        value = model.value(hidden)[:, p - 1]
        return action_logits.astype(jnp.float32), value.astype(jnp.float32)

    def action_log_probs(self, params, obs, actions, cands, legal):
        """Constrained token log-probs of given actions.

        Args: obs [N, O], actions [N, A], cands [N, K, A], legal [N, K].
        Returns: logp [N, A], entropy [N, A], value [N].
        """
        logits, value = self._run(params, obs, actions)
        allowed = jax.vmap(allowed_tokens, in_axes=(0, 0, 0, None))(
            actions, cands, legal, self.vocab_size)
        logp, ent = jax.vmap(constrained_log_probs)(logits, allowed, actions)
        return logp, ent, value

    def teacher_log_probs(self, params, obs, feedback, actions, cands, legal):
        """Hindsight teacher: log pi_T(y_j | x_t, o_{t+1}, y_<j) with the same constraint.

        Args: obs [N, O], feedback [N, F], actions [N, A], cands [N, K, A], legal [N, K].
        Returns: [N, A].
        """
        sep = jnp.full(obs.shape[:1] + (1,), SEP_ID, obs.dtype)
        # [obs SEP feedback] with its PAD moved right; _run then left-aligns it.
        prefix = _pads_to_right(jnp.concatenate([obs, sep, feedback], axis=1))
        logits, _ = self._run(params, prefix, actions)
        allowed = jax.vmap(allowed_tokens, in_axes=(0, 0, 0, None))(
            actions, cands, legal, self.vocab_size)
        logp, _ = jax.vmap(constrained_log_probs)(logits, allowed, actions)
        return logp

    def candidate_log_probs(self, params, obs, cands, legal):
        """Scores every candidate: pi(a_k | x) and the per-token log-probs along each.

        The observation prefix is run once and its KV cache shared by the K candidates
        (cost O + K (A - 1) tokens instead of K (O + A)).

        Args: obs [N, O], cands [N, K, A], legal [N, K].
        Returns: cand_logp [N, K] (-1e9 for illegal), token_logp [N, K, A], value [N].
        """
        n, k, a = cands.shape
        model = nnx.merge(self.graphdef, params)
        prefix = left_align(obs)
        o = prefix.shape[1]
        cache = init_cache(model.config, n, o + a - 1)
        logits0, hidden, cache = model.forward(prefix, attention_mask=prefix != PAD_ID,
                                               cache=cache)
        value = model.value(hidden)[:, -1]
        cache = jax.tree.map(lambda x: jnp.repeat(x, k, axis=0) if x.ndim else x, cache)
        flat = cands.reshape(n * k, a)
        logits_rest, _, _ = model.forward(flat[:, :-1], attention_mask=jnp.ones_like(flat[:, :-1], bool),
                                          cache=cache)
        first = jnp.repeat(logits0[:, -1:], k, axis=0)
        logits = jnp.concatenate([first, logits_rest], axis=1).astype(jnp.float32)  # [NK, A, V]
        allowed = jax.vmap(allowed_tokens, in_axes=(0, 0, 0, None))(
            flat, jnp.repeat(cands, k, axis=0), jnp.repeat(legal, k, axis=0), self.vocab_size)
        token_logp, _ = jax.vmap(constrained_log_probs)(logits, allowed, flat)
        token_logp = token_logp.reshape(n, k, a)
        cand_logp = jnp.where(legal, jnp.sum(token_logp, axis=-1), NEG_INF)
        return cand_logp, token_logp, value.astype(jnp.float32)

    def value(self, params, obs):
        """V(x) [N] for observations [N, O]."""
        dummy = jnp.zeros((obs.shape[0], 1), obs.dtype)
        _, value = self._run(params, obs, dummy)
        return value


def _pads_to_right(tokens: chex.Array) -> chex.Array:
    """Stable-compacts non-PAD tokens to the left (so left_align can re-pad them)."""
    is_real = tokens != PAD_ID
    order = jnp.argsort(~is_real, axis=-1, stable=True)
    return jnp.take_along_axis(tokens, order, axis=-1)
