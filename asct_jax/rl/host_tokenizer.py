"""The word-level tokenizer of a set of host games (TextWorld, ScienceWorld, ...): built
from the texts seen while playing them, saved once and reloaded.

    tok = load_or_build_tokenizer(directory, lambda: game_texts(env, seeds))
"""
from __future__ import annotations

import collections
import os
from typing import List, Sequence

import numpy as np

from asct_jax.envs.base import BOS_ID, EOS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID
from asct_jax.envs.prompt import feedback_words


def build_tokenizer(texts: Sequence[str], max_vocab: int = 4096, min_count: int = 1):
    """A word-level PreTrainedTokenizerFast over `texts` (lower-cased).

    Ids 0..4 are asct_jax.envs.base's special tokens (PAD, EOS, UNK, BOS, SEP); then the
    words (Whitespace pre-tokenizer: \\w+ runs and punctuation runs) by decreasing count,
    ties alphabetical, at most max_vocab tokens in all; then the words of the feedback
    frame (asct_jax.envs.prompt.feedback_words) that are not among them.
    Deterministic in `texts`.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.Whitespace()
    norm = normalizers.Lowercase()
    counts: collections.Counter = collections.Counter()
    for text in texts:
        counts.update(w for w, _ in pre.pre_tokenize_str(norm.normalize_str(text)))
    for s in SPECIAL_TOKENS:
        counts.pop(s, None)
    words = sorted((w for w, c in counts.items() if c >= min_count),
                   key=lambda w: (-counts[w], w))[: max(max_vocab - len(SPECIAL_TOKENS), 0)]
    words += [w for w in feedback_words() if w not in words]
    vocab = {w: i for i, w in enumerate(list(SPECIAL_TOKENS) + words)}
    assert [vocab[s] for s in SPECIAL_TOKENS] == [PAD_ID, EOS_ID, UNK_ID, BOS_ID, SEP_ID]
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS[UNK_ID]))
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=SPECIAL_TOKENS[PAD_ID],
        eos_token=SPECIAL_TOKENS[EOS_ID], unk_token=SPECIAL_TOKENS[UNK_ID],
        bos_token=SPECIAL_TOKENS[BOS_ID], sep_token=SPECIAL_TOKENS[SEP_ID])


def game_texts(env, seeds: Sequence[int], random_episodes: int = 2, max_steps: int = 20,
               rng_seed: int = 0) -> List[str]:
    """Observations, feedbacks and admissible commands seen while playing each game's
    walkthrough (when the env has one) and `random_episodes` uniformly random episodes."""
    rng = np.random.default_rng(rng_seed)
    texts: List[str] = []

    def play(state, ts, pick):
        texts.append(ts.observation)
        for i in range(max_steps):
            cmds = env.legal_actions(state)
            texts.extend(cmds)
            if state.done or not cmds:
                break
            action = pick(i, cmds)
            if action is None:
                break
            state, ts = env.step(state, action)
            texts.extend([ts.observation, ts.feedback])

    for seed in seeds:
        state, ts = env.reset(seed)
        if hasattr(env, "walkthrough"):
            wt = env.walkthrough(state)
            play(state, ts, lambda i, cmds, wt=wt: wt[i] if i < len(wt) else None)
        for _ in range(random_episodes):
            state, ts = env.reset(seed)
            play(state, ts, lambda i, cmds: cmds[int(rng.integers(len(cmds)))])
    return texts


def load_or_build_tokenizer(directory: str, texts_fn, **kwargs):
    """The tokenizer saved in `directory`, or build_tokenizer(texts_fn()) saved there."""
    from transformers import PreTrainedTokenizerFast

    if os.path.isfile(os.path.join(directory, "tokenizer.json")):
        return PreTrainedTokenizerFast.from_pretrained(directory)
    tok = build_tokenizer(texts_fn(), **kwargs)
    tmp = directory.rstrip("/") + f".tmp{os.getpid()}"
    tok.save_pretrained(tmp)
    os.makedirs(os.path.dirname(os.path.abspath(directory)), exist_ok=True)
    try:
        os.replace(tmp, directory)  # atomic: parallel builders write the same files
    except OSError:
        pass
    return PreTrainedTokenizerFast.from_pretrained(directory)
