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

Sequences fed to the decoder are [prefix (left-padded) | action header | action], the
prefix an observation or any prompt a method builds (`token_log_probs`, `distributions`
take it as given): the logits at the position before action token j predict it, and the
value head reads the hidden state just before the action. The headers are a
`PromptTokens` record (asct_jax.envs.prompt): empty / SEP for the environments' own word
vocabulary, the chat template's pieces for a pretrained model
(asct_jax.envs.text_interface).

Label scoring (`Policy.label_score`). "sum" (above, the default): pi(a_k | x) is the
constrained product, the probability of decoding the label token by token. "mean": each
legal label's score is the mean full-vocabulary log-prob of its response tokens (EOS
included, PAD excluded), and pi(a_k | x) = softmax over the legal labels of those scores,

    s_k = (1 / L_k) sum_j log p(cands[k, j] | x, cands[k, <j]),   pi(a_k | x) = softmax_k(s_k);

there is no token decomposition: the decision's log-prob sits on its first token (the
"decision token", `Policy.scored_tokens`) and the others carry 0 and no loss.

All functions are pure in (params, arrays); `Policy` only holds the static graph.
`params` is an nnx.State, or a tuple of States merged together (LoRA: the trainable
adapters and value head, then the frozen base).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from asct_jax.envs.base import PAD_ID
from asct_jax.envs.prompt import PromptTokens
from asct_jax.models import cache as cache_lib
from asct_jax.models import widths
from asct_jax.models.cache import init_cache
from asct_jax.rl.padding import left_align

NEG_INF = -1e9
LABEL_SCORES = ("sum", "mean")


def trie_live(actions: chex.Array, cands: chex.Array, legal: chex.Array,
              pad_id: int = PAD_ID) -> chex.Array:
    """Which candidate tokens are allowed continuations along `actions`.

    Args:
      actions: [..., A] int32, the action being decoded (its prefix defines the trie node).
      cands: [..., K, A] int32 candidate actions; legal: [..., K] bool.
    Returns:
      [..., K, A] bool: live[k, j] iff candidate k is legal, cands[k, <j] == actions[<j]
      and cands[k, j] is not PAD; then cands[k, j] is in Allowed_j (module docstring).
    """
    same = cands == actions[..., None, :]  # [..., K, A]
    # prefix_ok[k, j] = all(cands[k, :j] == actions[:j])
    prefix_ok = jnp.cumprod(jnp.concatenate(
        [jnp.ones_like(same[..., :1]), same[..., :-1]], axis=-1).astype(jnp.int32), axis=-1) > 0
    return prefix_ok & legal[..., None] & (cands != pad_id)


def first_occurrence(cands: chex.Array, live: chex.Array) -> chex.Array:
    """[..., K, A] bool: live[k, j] and no live k' < k has the same token at j.

    Allowed_j is a set: a token several live candidates share at j counts once.
    """
    k = cands.shape[-2]
    same = cands[..., :, None, :] == cands[..., None, :, :]          # [..., K, K', A]
    earlier = jnp.tril(jnp.ones((k, k), bool), -1)[:, :, None]       # k' < k
    dup = jnp.any(same & live[..., None, :, :] & earlier, axis=-2)
    return live & ~dup


def candidate_token_distribution(cand_logits: chex.Array, cands: chex.Array,
                                 live: chex.Array) -> Tuple[chex.Array, chex.Array]:
    """The constrained next-token distribution at every position, over Allowed_j.

    With keep[k, j] = first_occurrence(cands, live)[k, j] (each allowed token once) and
    Z_j = logsumexp_{k: keep} l_j(cands[k, j]):

        log pi(cands[k, j] | .) = l_j(cands[k, j]) - Z_j   where keep[k, j]

    This is the whole distribution the actor samples token j from (the full-vocabulary
    softmax of a free-form actor restricted to the trie), so a divergence between two of
    them is the exact per-token divergence.

    Args:
      cand_logits: [..., K, A] float32; cands: [..., K, A] int32; live: [..., K, A] bool.
    Returns:
      (log_probs [..., K, A], keep [..., K, A] bool); log_probs is -inf-free (NEG_INF - Z
      off keep) and only meaningful where keep.
    """
    keep = first_occurrence(cands, live)
    masked = jnp.where(keep, cand_logits, NEG_INF)
    log_z = jax.nn.logsumexp(masked, axis=-2)                        # [..., A]
    return masked - log_z[..., None, :], keep


def candidate_constrained_log_probs(cand_logits: chex.Array, cands: chex.Array,
                                    live: chex.Array, tokens: chex.Array
                                    ) -> Tuple[chex.Array, chex.Array]:
    """Constrained log pi(y_j | .) and entropy from the logits of the candidates' tokens only.

    The constrained softmax at position j only involves the logits of Allowed_j, the
    distinct tokens cands[k, j] of the live candidates (`trie_live`): with
    Z_j = logsumexp_{v in Allowed_j} l_j(v),

        log pi(y_j) = l_j(y_j) - Z_j,   H_j = -sum_{v in Allowed_j} pi(v) log pi(v),

    so the cost is O(K A) logits per action instead of O(A V) (and no [K, A, V] mask).
    Equal to `constrained_log_probs(logits, allowed_tokens(...), tokens)`.

    Args:
      cand_logits: [..., K, A] float32, l_j(cands[k, j]): the logit of candidate k's
        token j at the action's position j.
      cands: [..., K, A] int32; live: [..., K, A] bool (`trie_live` of `tokens`);
      tokens: [..., A] int32, the action whose log-probs are wanted.
    Returns:
      logp [..., A], entropy [..., A]; 0 for both where no token is allowed. A token
      outside Allowed_j gets log-prob NEG_INF - Z_j, as the masked softmax gives it.
    """
    keep = first_occurrence(cands, live)
    masked = jnp.where(keep, cand_logits, NEG_INF)
    log_z = jax.nn.logsumexp(masked, axis=-2)                        # [..., A]
    hit = keep & (cands == tokens[..., None, :])                    # at most one per j
    member = jnp.any(hit, axis=-2)
    token_logit = jnp.sum(jnp.where(hit, cand_logits, 0.0), axis=-2)
    logp = jnp.where(member, token_logit, NEG_INF) - log_z
    logp_all = masked - log_z[..., None, :]
    p = jnp.where(keep, jnp.exp(logp_all), 0.0)
    entropy = -jnp.sum(p * jnp.where(keep, logp_all, 0.0), axis=-2)
    any_allowed = jnp.any(keep, axis=-2)
    return jnp.where(any_allowed, logp, 0.0), jnp.where(any_allowed, entropy, 0.0)


def allowed_tokens(actions: chex.Array, cands: chex.Array, legal: chex.Array,
                   vocab_size: int, pad_id: int = PAD_ID) -> chex.Array:
    """The constrained-decoding trie mask as a dense [A, V] set (test reference).

    Args:
      actions: [A] int32, the action being decoded (its prefix defines the trie node).
      cands: [K, A] int32 candidate actions; legal: [K] bool.
    Returns:
      [A, V] bool: allowed[j, v] iff some legal candidate k has cands[k, <j] == actions[<j]
      and cands[k, j] == v (Allowed_j above). PAD is never allowed (actions end at EOS).
      O(K A V) memory: the policy itself uses `candidate_constrained_log_probs`.
    """
    chex.assert_rank([actions, cands, legal], [1, 2, 1])
    live = trie_live(actions, cands, legal, pad_id)  # [K, A]
    onehot = jax.nn.one_hot(cands, vocab_size, dtype=jnp.bool_)  # [K, A, V]
    return jnp.any(onehot & live[:, :, None], axis=0)


def constrained_log_probs(logits: chex.Array, allowed: chex.Array,
                          tokens: chex.Array) -> Tuple[chex.Array, chex.Array]:
    """log pi(y_j | .) and entropy of the full masked softmax (test reference).

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


def head_logits(model, hidden: chex.Array, tokens: chex.Array, spec: str) -> chex.Array:
    """Logits of chosen tokens only: l[..] = hidden . W_lm[tokens] (+ bias), float32.

    `spec` is an einsum of (hidden, rows) where rows = W_lm[tokens] has `tokens`' shape
    plus H; equal to gathering `model.logits(hidden)` at `tokens`.
    """
    rows, bias = model.head_rows(tokens)
    out = jnp.einsum(spec, hidden.astype(rows.dtype), rows,
                     preferred_element_type=jnp.float32)
    return out if bias is None else out + bias.astype(jnp.float32)


# A reduction of a pass's next-token distributions, per position: (fn, inputs) with
# fn(dist_logp [..., K, A], support [..., K, A] bool, inputs) -> [..., A] and `inputs` a
# pytree in the policy's distribution layout (`distributions`: [N, K, A] here; the
# generating actor's [N, R, V] is reduced a chunk of rows at a time, each row given to fn
# as [V, 1]). A method's losses read the result as TokenOutputs.reduced.
DistReduce = Tuple[Callable[..., chex.Array], Any]


@chex.dataclass(frozen=True)
class TokenOutputs:
    """What one pass of the current parameters gives the losses, per action token.

    logp, entropy: [N, A] (constrained); value: [N]; dist_logp, support: [N, K, A], the
    constrained next-token distribution at each position (candidate_token_distribution;
    None where the policy never forms it whole: the generating actor's is [N, A, V]);
    reduced: [N, A] the pass's `dist_reduce` at each position (DistReduce), else None.
    The train step reshapes N to [b, T].
    """

    logp: chex.Array
    entropy: chex.Array
    value: chex.Array
    dist_logp: Optional[chex.Array] = None
    support: Optional[chex.Array] = None
    reduced: Optional[chex.Array] = None


class Policy:
    """Static wrapper: graphdef of the decoder plus sizes. Params are passed explicitly.

    `input_len` is the length of what the decoder reads before the action: the observation
    O for a candidate scorer, the prompt P for a generating actor (GenerationPolicy)."""

    def __init__(self, graphdef, vocab_size: int, input_len: int, action_len: int,
                 feedback_len: int, prompt: PromptTokens = PromptTokens(),
                 label_score: str = "sum", prompt_widths: int = widths.BUCKETS):
        if label_score not in LABEL_SCORES:
            raise ValueError(f"policy.label_score must be one of {LABEL_SCORES}, got "
                             f"{label_score!r}")
        if not (isinstance(prompt_widths, int) and prompt_widths >= 1):
            raise ValueError(f"policy.prompt_widths must be an int >= 1, got {prompt_widths!r}")
        self.label_score = label_score
        self.prompt_widths = prompt_widths   # static widths of the undifferentiated passes
        self.graphdef = graphdef
        self.vocab_size = vocab_size
        self.input_len = input_len
        self.action_len = action_len
        self.feedback_len = feedback_len
        self.prompt = prompt
        self.pad_id = prompt.pad_id

    def merge(self, params):
        """The decoder of `params` (an nnx.State or a tuple of States)."""
        parts = params if isinstance(params, tuple) else (params,)
        return nnx.merge(self.graphdef, *parts)

    def _ids(self, ids: Tuple[int, ...], n: int, dtype) -> chex.Array:
        """[n, len(ids)] copies of a static header."""
        return jnp.broadcast_to(jnp.asarray(ids, dtype), (n, len(ids)))

    def _with_action_header(self, left_aligned: chex.Array) -> chex.Array:
        header = self._ids(self.prompt.action_header, left_aligned.shape[0], left_aligned.dtype)
        return jnp.concatenate([left_aligned, header], axis=1)

    # -- decoder passes -------------------------------------------------------------
    def _hidden(self, model, prefix: chex.Array, actions: chex.Array):
        """prefix [N, P] right-padded, actions [N, A] -> (hidden states predicting the
        action tokens [N, A, H], value [N], the pre-action boundary state [N, H]). No
        [.., V] logits are formed."""
        prefix = self._with_action_header(left_align(prefix, self.pad_id))
        ids = jnp.concatenate([prefix, actions], axis=1)
        mask = jnp.concatenate([prefix != self.pad_id, jnp.ones_like(actions, bool)], axis=1)
        hidden, _ = model.hidden_states(ids, attention_mask=mask)
        p = prefix.shape[1]
        action_hidden = hidden[:, p - 1:p - 1 + actions.shape[1]]
        value = model.value(hidden[:, p - 1:p])[:, 0]
        return action_hidden, value.astype(jnp.float32), hidden[:, p - 1]

    def _cand_logits(self, model, action_hidden, actions, cands, legal):
        """(logits of the candidates' tokens [N, K, A], their trie liveness [N, K, A])."""
        cand_logits = head_logits(model, action_hidden, cands, "njh,nkjh->nkj")
        return cand_logits, trie_live(actions, cands, legal, self.pad_id)

    def _constrained(self, model, action_hidden, actions, cands, legal):
        """Constrained log-probs and entropy [N, A] of `actions` from their hidden states."""
        cand_logits, live = self._cand_logits(model, action_hidden, actions, cands, legal)
        return candidate_constrained_log_probs(cand_logits, cands, live, actions)

    def action_log_probs(self, params, obs, actions, cands, legal):
        """Constrained token log-probs of given actions.

        Args: obs [N, O], actions [N, A], cands [N, K, A], legal [N, K].
        Returns: logp [N, A], entropy [N, A], value [N].
        """
        if self.label_score == "mean":
            out = self.action_outputs(params, obs, actions, cands, legal)
            return out.logp, out.entropy, out.value
        model = self.merge(params)
        hidden, value, _ = self._hidden(model, obs, actions)
        logp, ent = self._constrained(model, hidden, actions, cands, legal)
        return logp, ent, value

    def action_outputs(self, params, obs, actions, cands, legal,
                       dist_reduce: Optional[DistReduce] = None) -> "TokenOutputs":
        """One pass: the action's token log-probs, entropy, value and the whole
        constrained next-token distribution at each of its positions (what the losses
        read, asct_jax.rl.credit.PolicyLossFn). Shapes as action_log_probs, plus
        dist_logp / support [N, K, A] (candidate_token_distribution); with `dist_reduce`
        = (fn, inputs [N, K, A] pytree), reduced [N, A] = fn(dist_logp, support, inputs)."""
        model = self.merge(params)
        hidden, value, _ = self._hidden(model, obs, actions)
        cand_logits, live = self._cand_logits(model, hidden, actions, cands, legal)
        logp, ent = candidate_constrained_log_probs(cand_logits, cands, live, actions)
        dist_logp, support = candidate_token_distribution(cand_logits, cands, live)
        if self.label_score == "mean":
            # The decision's log-prob and entropy on its first token (module docstring).
            cand_logp, _, value = self.candidate_log_probs(params, obs, cands, legal)
            hit = jnp.all(cands == actions[:, None, :], axis=-1) & legal        # [N, K]
            first_hit = jnp.argmax(hit, axis=-1)                  # duplicates: the first
            taken = jnp.where(jnp.any(hit, -1), jnp.take_along_axis(
                cand_logp, first_hit[:, None], axis=-1)[:, 0], NEG_INF)
            p = jnp.where(legal, jnp.exp(cand_logp), 0.0)
            h = -jnp.sum(p * jnp.where(legal, cand_logp, 0.0), axis=-1)         # categorical
            first = jnp.arange(actions.shape[1]) == 0
            logp = jnp.where(first, taken[:, None], 0.0)
            ent = jnp.where(first, h[:, None], 0.0)
        reduced = None
        if dist_reduce is not None:
            reduced = dist_reduce[0](dist_logp, support, dist_reduce[1])
        return TokenOutputs(logp=logp, entropy=ent, value=value, dist_logp=dist_logp,
                            support=support, reduced=reduced)

    def scored_tokens(self, actions: chex.Array) -> chex.Array:
        """[N, A] bool: the action tokens that carry the decision's log-prob and its loss:
        every non-PAD token ("sum"), or the first token only ("mean")."""
        if self.label_score == "mean":
            return (jnp.arange(actions.shape[-1]) == 0) & (actions != self.pad_id)
        return actions != self.pad_id

    def token_log_probs(self, params, prefix, actions, cands, legal):
        """Constrained log pi(y_j | prefix, y_<j) of given actions after any prefix (the
        token decomposition, whatever the label scoring).

        Args: prefix [N, P] right-padded, actions [N, A], cands [N, K, A], legal [N, K].
        Returns: [N, A].
        """
        model = self.merge(params)
        hidden, _, _ = self._hidden(model, prefix, actions)
        logp, _ = self._constrained(model, hidden, actions, cands, legal)
        return logp

    def distributions(self, params, prefix, actions, cands, legal):
        """The token log-probs [N, A] after any prefix and the whole constrained
        next-token distribution (dist_logp, support [N, K, A]) along the action: this
        policy's distribution layout (what a DistReduce's inputs follow)."""
        model = self.merge(params)
        hidden, _, _ = self._hidden(model, prefix, actions)
        cand_logits, live = self._cand_logits(model, hidden, actions, cands, legal)
        logp, _ = candidate_constrained_log_probs(cand_logits, cands, live, actions)
        dist_logp, support = candidate_token_distribution(cand_logits, cands, live)
        return logp, dist_logp, support

    def features(self, params, obs):
        """The backbone's last hidden state at the pre-action boundary of x [N, H]
        float32, stop-gradient: the input of a head trained apart from the policy. The
        pass skips the columns of obs that are PAD in every row (models.widths)."""
        boundary = self._undifferentiated_pass(params, obs)[1]
        return jax.lax.stop_gradient(boundary.astype(jnp.float32))

    def candidate_log_probs(self, params, obs, cands, legal):
        """Scores every candidate: pi(a_k | x) and the per-token log-probs along each.

        The observation prefix is run once and its KV cache shared by the K candidates
        (cost O + K (A - 1) tokens instead of K (O + A)). Each candidate's log-probs come
        from its hidden states and the LM-head rows of the K candidates' tokens only
        (memory O(N K K A), no [N K A V] logits or masks).

        Args: obs [N, O], cands [N, K, A], legal [N, K].
        Returns: cand_logp [N, K] (-1e9 for illegal), token_logp [N, K, A], value [N]
        ("mean" label scoring: token_logp holds cand_logp on each candidate's first token).
        """
        n, k, a = cands.shape
        model = self.merge(params)
        prefix = self._with_action_header(left_align(obs, self.pad_id))
        o = prefix.shape[1]
        cache = init_cache(model.config, n, o + a - 1)
        hidden0, cache = model.hidden_states(prefix, attention_mask=prefix != self.pad_id,
                                             cache=cache)
        value = model.value(hidden0[:, -1:])[:, 0]
        cache = cache_lib.repeat(cache, k)
        flat = cands.reshape(n * k, a)
        hidden_rest, _ = model.hidden_states(
            flat[:, :-1], attention_mask=jnp.ones_like(flat[:, :-1], bool), cache=cache)
        first = jnp.broadcast_to(hidden0[:, None, -1:], (n, k, 1, hidden0.shape[-1]))
        hidden = jnp.concatenate(
            [first, hidden_rest.reshape(n, k, a - 1, -1).astype(first.dtype)], axis=2)
        # logits[n, k, c, j]: candidate c's token j read from candidate k's hidden state j
        # (the same state wherever c is live along k: they share the prefix).
        cand_logits = head_logits(model, hidden, cands, "nkjh,ncjh->nkcj")
        live = trie_live(cands, cands[:, None], legal[:, None], self.pad_id)  # [N, K, K, A]
        token_logp, _ = candidate_constrained_log_probs(
            cand_logits, jnp.broadcast_to(cands[:, None], live.shape), live, cands)
        if self.label_score == "mean":
            # s_k = mean_j log p(cands[k, j] | x, cands[k, <j]) over the full vocabulary.
            full = jax.nn.log_softmax(model.logits(hidden), axis=-1)         # [N, K, A, V]
            tok = jnp.take_along_axis(full, cands[..., None], axis=-1)[..., 0]
            real = cands != self.pad_id
            score = jnp.sum(jnp.where(real, tok, 0.0), -1) / jnp.maximum(real.sum(-1), 1)
            cand_logp = jax.nn.log_softmax(jnp.where(legal, score, NEG_INF), axis=-1)
            cand_logp = jnp.where(legal, cand_logp, NEG_INF)           # pi = softmax_k(s_k)
            token_logp = jnp.where(jnp.arange(a) == 0, cand_logp[..., None], 0.0)
            return cand_logp, token_logp, value.astype(jnp.float32)
        cand_logp = jnp.where(legal, jnp.sum(token_logp, axis=-1), NEG_INF)
        return cand_logp, token_logp, value.astype(jnp.float32)

    def value(self, params, obs):
        """V(x) [N] for observations [N, O]."""
        model = self.merge(params)
        dummy = jnp.zeros((obs.shape[0], 1), obs.dtype)
        _, value, _ = self._hidden(model, obs, dummy)
        return value

    def acting_value(self, params, obs):
        """`value` of the acting policy, never differentiated: the pass skips the columns
        of obs that are PAD in every row (models.widths)."""
        return self._undifferentiated_pass(params, obs)[0]

    def _undifferentiated_pass(self, params, obs):
        """obs [N, O] -> (value [N], pre-action boundary state [N, H]) from one pass on
        the columns of obs that are not PAD in every row (models.widths: a switch, so
        never under a gradient)."""
        model = self.merge(params)
        dummy = jnp.zeros((obs.shape[0], 1), obs.dtype)
        return widths.right_padded(lambda x: self._hidden(model, x, dummy)[1:], obs,
                                   self.pad_id, self.prompt_widths)
