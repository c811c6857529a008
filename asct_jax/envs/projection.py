"""Action projection: a generated response -> the action the environment receives.

verl-agent's rule (agent_system/environments/env_package/alfworld/projection.py). The model
writes "<think>...</think><action>...</action>"; with s = response.lower(),

    start = s.find("<action>"),  end = s.find("</action>")     (first of each, anywhere)
    missing either:  action = s[-30:],                                   valid = False
    else:            action = s[start + len("<action>"):end].strip().lower()
                              (empty when end < start + len("<action>"))
                     valid  = "<think>" in response and "</think>" in response
                              and action is admissible
          (require_think=False, the project's `actor.think = "none"`: no think test)

An invalid action is an ordinary step: the environment answers "Nothing happens." (and the
step's reward is reduced by 0.1 elsewhere). verl-agent itself leaves admissibility to the
environment (and also rejects responses holding CJK characters); this project's spec counts
an inadmissible action as invalid, and has no CJK rule.

Two implementations of the same rule:

* `project` on host strings (the external, text-driven environments), and
  `project_text_tokens`, the same inside jit through a host callback that decodes with a
  pretrained tokenizer (the pretrained actor on the JAX-native analogues: its tags are
  several tokens that merge with their neighbours differently in each context);
* `project_tokens` in jit on token ids (the JAX-native environments, the tiny word-level
  actor, and a pretrained tokenizer where a tag is several tokens). Tags are fixed id
  sequences (`Tags`); "strip and lower-case" is implicit in comparing ids (the span's tokens
  are the words between the tags, and the vocabulary's words are distinct after lower()).
  It agrees with `project` on the response decoded with its words joined by single spaces
  (tests/asct_jax/envs/test_projection.py). A pretrained tokenizer that splits a tag differently in some
  context (e.g. merging it with a neighbouring space) is not matched there.

Token classes for the losses: `action_mask` marks the action tokens (strictly inside the
action tags, the tags excluded); the other response tokens are non-action tokens.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence, Tuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ACTION_OPEN, ACTION_CLOSE = "<action>", "</action>"
TAG_STRINGS = (THINK_OPEN, THINK_CLOSE, ACTION_OPEN, ACTION_CLOSE)   # the order of Tags
FALLBACK_CHARS = 30  # a response without both action tags sends its last 30 characters


def project(response: str, admissible: Sequence[str],
            require_think: bool = True) -> Tuple[str, bool]:
    """(action string sent to the environment, valid) for one generated response.

    `admissible`: the environment's admissible actions, compared after strip + lower-case.
    `require_think`: a response without both think tags is invalid (the authors' rule).
    """
    s = response.lower()
    start, end = s.find(ACTION_OPEN), s.find(ACTION_CLOSE)
    if start == -1 or end == -1:
        return s[-FALLBACK_CHARS:], False
    action = s[start + len(ACTION_OPEN):end].strip().lower()
    has_think = THINK_OPEN in response and THINK_CLOSE in response  # original case
    return action, ((has_think or not require_think)
                    and action in {a.strip().lower() for a in admissible})


class Tags(NamedTuple):
    """The four tags as token-id sequences (hashable: static under jit)."""

    think_open: Tuple[int, ...]
    think_close: Tuple[int, ...]
    action_open: Tuple[int, ...]
    action_close: Tuple[int, ...]


class ProjectedAction(NamedTuple):
    """`project_tokens`'s result.

    Attributes:
      index: [...] int32, the matched legal candidate; -1 when invalid.
      valid: [...] bool.
      action: [..., A] int32, cands[index] when valid, else all PAD (an action no
        environment accepts: "Nothing happens.").
      action_mask: [..., R] bool, the action tokens: after the first action_open tag and
        before the first action_close tag (tags excluded); empty if a tag is missing or
        the close tag comes first.
      has_think: [...] bool, both think tags present; has_action: [...] bool, both
        action tags present.
    """

    index: chex.Array
    valid: chex.Array
    action: chex.Array
    action_mask: chex.Array
    has_think: chex.Array
    has_action: chex.Array


def find_first(tokens: chex.Array, pattern: Tuple[int, ...], mask: chex.Array) -> chex.Array:
    """Start of the first occurrence of `pattern` with every token inside `mask`.

    Args:
      tokens: [..., R] int32; pattern: non-empty static tuple of P ids; mask: [..., R] bool.
    Returns:
      [...] int32: min{i : tokens[i + j] == pattern[j] and mask[i + j] for all j < P},
      or R if there is none.
    """
    chex.assert_equal_shape([tokens, mask])
    assert len(pattern) > 0, "empty tag"
    r = tokens.shape[-1]
    hit = jnp.ones(tokens.shape, bool)
    for j, tok in enumerate(pattern):  # static P; hit[i] &= (tokens[i + j] == pattern[j])
        here = (tokens == tok) & mask
        pad = jnp.zeros(tokens.shape[:-1] + (min(j, r),), bool)  # i + j past the end
        hit = hit & jnp.concatenate([here[..., j:], pad], axis=-1)
    return jnp.where(jnp.any(hit, -1), jnp.argmax(hit, -1), r).astype(jnp.int32)


def project_tokens(response: chex.Array, response_mask: chex.Array, cands: chex.Array,
                   legal: chex.Array, tags: Tags, pad_id: int, eos_id: int,
                   require_think: bool = True) -> ProjectedAction:
    """The projection rule on token ids (module docstring), batched over leading dims.

    Args:
      response: [..., R] int32, the generated tokens.
      response_mask: [..., R] bool, True on the generated tokens (a prefix of the row;
        tags must lie wholly inside it).
      cands: [..., K, A] int32, candidate actions: content, then EOS / PAD. A candidate's
        content is its tokens before the first EOS or PAD.
      legal: [..., K] bool, the admissible candidates.
      tags, pad_id, eos_id, require_think: static (require_think as `project`).
    Returns:
      ProjectedAction. The span matches candidate k iff k is legal and the span's tokens
      equal k's content (same length, same ids); among duplicates, the first k.
    """
    chex.assert_equal_shape([response, response_mask])
    chex.assert_equal_shape_prefix([response, cands, legal], response.ndim - 1)
    chex.assert_equal_shape_prefix([cands, legal], cands.ndim - 1)
    r, a = response.shape[-1], cands.shape[-1]
    first = lambda p: find_first(response, p, response_mask)  # noqa: E731
    has_think = (first(tags.think_open) < r) & (first(tags.think_close) < r)
    open_at, close_at = first(tags.action_open), first(tags.action_close)
    has_action = (open_at < r) & (close_at < r)
    start = open_at + len(tags.action_open)  # s[start + len("<action>"):end]
    pos = jnp.arange(r)
    action_mask = (has_action[..., None] & (pos >= start[..., None])
                   & (pos < close_at[..., None]) & response_mask)
    n = jnp.sum(action_mask, -1)                                          # span length
    stop = (cands == eos_id) | (cands == pad_id)
    length = jnp.where(jnp.any(stop, -1), jnp.argmax(stop, -1), a)       # [..., K]
    # span[j] = response[start + j]; positions j >= n never decide a match (length == n).
    span = jnp.take_along_axis(response, jnp.clip(start[..., None] + jnp.arange(a), 0, r - 1),
                               axis=-1)                                   # [..., A]
    same = (span[..., None, :] == cands) | (jnp.arange(a) >= length[..., None])
    match = legal & (length == n[..., None]) & jnp.all(same, -1)          # [..., K]
    valid = (has_think | (not require_think)) & has_action & jnp.any(match, -1)
    index = jnp.where(valid, jnp.argmax(match, -1), -1).astype(jnp.int32)
    chosen = jnp.take_along_axis(cands, jnp.maximum(index, 0)[..., None, None], axis=-2)
    action = jnp.where(valid[..., None], chosen[..., 0, :], pad_id).astype(jnp.int32)
    return ProjectedAction(index=index, valid=valid, action=action, action_mask=action_mask,
                           has_think=has_think, has_action=has_action)


def _content(ids, stop_ids) -> list:
    """The tokens of a row before its first stop / PAD id."""
    out = []
    for i in ids:
        if int(i) in stop_ids:
            break
        out.append(int(i))
    return out


def project_text_host(response, response_mask, cands, legal, tokenizer, pad_id: int,
                      stop_id: int, require_think: bool = True):
    """`project` on decoded text, for a pretrained tokenizer (numpy in and out).

    Args: response [N, R], response_mask [N, R], cands [N, K, A], legal [N, K] (numpy);
      tokenizer: its `decode`; a candidate's text is its tokens before stop_id / PAD.
    Returns: index [N] int32 (-1 invalid), valid [N], action_mask [N, R] (the tokens whose
      decoded characters overlap the text between the first <action> and </action>),
      has_think [N], has_action [N].
    """
    response, response_mask = np.asarray(response), np.asarray(response_mask)
    cands, legal = np.asarray(cands), np.asarray(legal)
    n, r = response.shape
    index = np.full((n,), -1, np.int32)
    valid, has_think, has_action = (np.zeros((n,), bool) for _ in range(3))
    action_mask = np.zeros((n, r), bool)
    dec = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    for i in range(n):
        ids = [int(t) for t, m in zip(response[i], response_mask[i]) if m]
        text = dec(ids)
        texts = [dec(_content(c, {stop_id, pad_id})).strip().lower() for c in cands[i]]
        admissible = [t for t, ok in zip(texts, legal[i]) if ok]
        action, ok = project(text, admissible, require_think)
        s = text.lower()
        start, end = s.find(ACTION_OPEN), s.find(ACTION_CLOSE)
        has_action[i] = start != -1 and end != -1
        has_think[i] = THINK_OPEN in text and THINK_CLOSE in text
        if ok:
            valid[i] = True
            index[i] = next(k for k, (t, live) in enumerate(zip(texts, legal[i]))
                            if live and t == action)
        if has_action[i] and end > start + len(ACTION_OPEN):
            lo, hi = start + len(ACTION_OPEN), end
            ends = [len(dec(ids[:j + 1])) for j in range(len(ids))]   # token j: [e_{j-1}, e_j)
            starts = [0] + ends[:-1]
            cols = np.flatnonzero(response_mask[i])
            for j, (a, b) in enumerate(zip(starts, ends)):
                action_mask[i, cols[j]] = a < hi and b > lo
    return index, valid, action_mask, has_think, has_action


def project_text_tokens(response: chex.Array, response_mask: chex.Array, cands: chex.Array,
                        legal: chex.Array, tokenizer, pad_id: int, stop_id: int,
                        require_think: bool = True) -> ProjectedAction:
    """`project_tokens`'s contract by the text rule: the response and the candidates are
    decoded with `tokenizer` on the host (jax.pure_callback) and `project` decides
    (project_text_host). Shapes as project_tokens, with [N] leading dims."""
    n, r = response.shape
    out_types = (jax.ShapeDtypeStruct((n,), jnp.int32), jax.ShapeDtypeStruct((n,), bool),
                 jax.ShapeDtypeStruct((n, r), bool), jax.ShapeDtypeStruct((n,), bool),
                 jax.ShapeDtypeStruct((n,), bool))
    host = lambda *a: project_text_host(*a, tokenizer, pad_id, stop_id,  # noqa: E731
                                        require_think)
    index, valid, action_mask, has_think, has_action = jax.pure_callback(
        host, out_types, response, response_mask, cands, legal, vmap_method="sequential")
    chosen = jnp.take_along_axis(cands, jnp.maximum(index, 0)[:, None, None], axis=1)[:, 0]
    action = jnp.where(valid[:, None], chosen, pad_id).astype(jnp.int32)
    return ProjectedAction(index=index, valid=valid, action=action,
                           action_mask=action_mask & response_mask, has_think=has_think,
                           has_action=has_action)
