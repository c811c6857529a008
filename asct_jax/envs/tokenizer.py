"""One word-level tokenizer for all JAX-native text environments.

Built with `tokenizers` (WordLevel model, Whitespace pre-tokenizer: words are \\w+ runs and
punctuation runs) from the union of every environment's word list, sorted, after the
special tokens of `asct_jax.envs.base.SPECIAL_TOKENS` (ids 0..4 in that order), and wrapped
in transformers' PreTrainedTokenizerFast. The vocabulary is deterministic. The words come
from the registry (asct_jax.envs installs them with `set_word_source` on import): this
module imports no environment. The words of the feedback frame (asct_jax.envs.prompt)
that no environment uses come after them (so every environment word keeps its id);
`word_feedback_frame` gives the frame's pieces in a word vocabulary.

    tok = get_tokenizer()              # cached
    ids = encode_fixed("go to the fridge", 8)   # np.int32[8], PAD-padded
    save_tokenizer(d); PreTrainedTokenizerFast.from_pretrained(d)  # same ids
"""
from __future__ import annotations

import functools
from typing import Callable, Iterable, List, Optional

import numpy as np

from asct_jax.envs.base import BOS_ID, EOS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID
from asct_jax.envs.prompt import (FEEDBACK_INSTRUCTION, FEEDBACK_TITLE, FeedbackFrame,
                                  feedback_words)

MAX_VOCAB = 1024

_word_source: Optional[Callable[[], Iterable[str]]] = None


def set_word_source(words: Callable[[], Iterable[str]]) -> None:
    """Install `words() -> every environment word` (the registry does, on import)."""
    global _word_source
    _word_source = words
    get_tokenizer.cache_clear()
    _ids.cache_clear()


def vocabulary() -> List[str]:
    """All tokens, special tokens first (ids 0..4), then the sorted union of env words,
    then the feedback frame's words that are not env words (in order of use)."""
    if _word_source is None:
        raise RuntimeError("no environment words installed: import asct_jax.envs")
    words = set(_word_source()) - set(SPECIAL_TOKENS)
    vocab = (list(SPECIAL_TOKENS) + sorted(words)
             + [w for w in feedback_words() if w not in words])
    if len(vocab) > MAX_VOCAB:
        raise ValueError(f"vocabulary has {len(vocab)} tokens > {MAX_VOCAB}")
    return vocab


@functools.lru_cache(maxsize=1)
def get_tokenizer():
    """The shared transformers PreTrainedTokenizerFast (cached)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(vocabulary())}
    assert [vocab[s] for s in SPECIAL_TOKENS] == [PAD_ID, EOS_ID, UNK_ID, BOS_ID, SEP_ID]
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS[UNK_ID]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=SPECIAL_TOKENS[PAD_ID],
        eos_token=SPECIAL_TOKENS[EOS_ID],
        unk_token=SPECIAL_TOKENS[UNK_ID],
        bos_token=SPECIAL_TOKENS[BOS_ID],
        sep_token=SPECIAL_TOKENS[SEP_ID],
    )


# The generating actor's tags (asct_jax.rl.generation): ids appended after the word
# vocabulary, so the candidate-scoring actor's vocabulary (and every id) is unchanged.
TAG_TOKENS = ("<think>", "</think>", "<action>", "</action>")


def tag_ids(base_vocab_size: int) -> tuple:
    """The ids of TAG_TOKENS for a generating actor over base_vocab_size words + tags."""
    return tuple(base_vocab_size + i for i in range(len(TAG_TOKENS)))


def word_ids(tokenizer, text: str) -> tuple:
    """Ids of `text` in a word vocabulary: lower-cased words, every newline a SEP.
    Raises ValueError for a word outside the vocabulary."""
    ids = []
    for i, line in enumerate(text.lower().split("\n")):
        if i:
            ids.append(SEP_ID)
        ids.extend(tokenizer.backend_tokenizer.encode(line, add_special_tokens=False).ids)
    if UNK_ID in ids:
        raise ValueError(f"text {text!r} has words outside the word vocabulary")
    return tuple(ids)


def word_feedback_frame(tokenizer) -> FeedbackFrame:
    """The feedback frame in a word vocabulary (asct_jax.envs.prompt):
    header = SEP SEP immediate feedback from the current step : SEP,
    footer = SEP SEP correctly solve the current task . SEP."""
    return FeedbackFrame(header=word_ids(tokenizer, FEEDBACK_TITLE),
                         footer=word_ids(tokenizer, FEEDBACK_INSTRUCTION))


def save_tokenizer(directory: str) -> None:
    """Write the tokenizer files; reload with PreTrainedTokenizerFast.from_pretrained(dir)."""
    get_tokenizer().save_pretrained(directory)


@functools.lru_cache(maxsize=4096)
def _ids(text: str) -> tuple:
    return tuple(get_tokenizer().backend_tokenizer.encode(text, add_special_tokens=False).ids)


def encode_fixed(text: str, length: int) -> np.ndarray:
    """Token ids of `text` padded with PAD to np.int32[length].

    "<sep>" in the text becomes SEP. Raises ValueError if the text is longer than `length`
    or contains a word outside the vocabulary (templates must be covered by it).
    """
    ids = []
    for i, part in enumerate(text.split("<sep>")):
        if i:
            ids.append(SEP_ID)
        ids.extend(_ids(part))
    if UNK_ID in ids:
        raise ValueError(f"text {text!r} has words outside the environment vocabulary")
    if len(ids) > length:
        raise ValueError(f"text {text!r} has {len(ids)} tokens > length {length}")
    out = np.full((length,), PAD_ID, np.int32)
    out[: len(ids)] = ids
    return out


def decode(ids) -> str:
    """Token ids -> text, PAD dropped (for debugging and examples)."""
    ids = [int(i) for i in np.asarray(ids).reshape(-1) if int(i) != PAD_ID]
    return get_tokenizer().decode(ids)
