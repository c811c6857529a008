"""Host games' text <-> token ids: the codecs (the games' word-level tokenizer, or a
pretrained model's tokenizer and chat template), the command encoder that turns a game's
admissible commands into candidate token sequences, and the command a game receives for a
generated response the projection found invalid.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from asct_jax.envs.base import EOS_ID, PAD_ID
from asct_jax.envs.external.base import HostState, encode

# Commands that only look at the game (dropped first when there are too many candidates).
OBSERVE_VERBS = ("examine", "look", "inventory")


class WordCodec:
    """Game text in the games' own word-level tokenizer (host_tokenizer.build_tokenizer:
    PAD 0, EOS 1): observations and feedback keep their last tokens, a command is its
    words then EOS."""

    def __init__(self, tokenizer):
        self.tokenizer, self.pad_id = tokenizer, PAD_ID

    def observations(self, texts: Sequence[str], length: int) -> np.ndarray:
        return encode(texts, self.tokenizer, length)

    def feedback(self, texts: Sequence[str], length: int) -> np.ndarray:
        return encode(texts, self.tokenizer, length)

    def command_ids(self, text: str) -> List[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [EOS_ID]


class ChatCodec:
    """Game text, as is, in a pretrained model's tokenizer and chat template: the
    observation is the user message after the system prompt (the template kept whole, the
    text's last tokens kept when it is too long), feedback its last F tokens, a command
    the assistant's reply ending with the end-of-turn token (asct_jax.envs.text_interface).
    """

    def __init__(self, tokenizer, system_prompt: str):
        from asct_jax.envs.text_interface import ChatPieces, pick_pad

        self.tokenizer = tokenizer
        self.pieces = ChatPieces(tokenizer, system_prompt)
        self.pad_id = pick_pad(tokenizer, self.pieces.ids())

    def _ids(self, text: str) -> List[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def observations(self, texts: Sequence[str], length: int) -> np.ndarray:
        head, tail = self.pieces.obs_head, self.pieces.obs_tail
        room = int(length) - len(head) - len(tail)
        if room <= 0:
            raise ValueError(f"textworld.obs_len = {length} cannot hold the chat template "
                             f"({len(head) + len(tail)} tokens)")
        out = np.full((len(texts), int(length)), self.pad_id, np.int32)
        for i, text in enumerate(texts):
            ids = head + self._ids(text)[-room:] + tail
            out[i, :len(ids)] = ids
        return out

    def feedback(self, texts: Sequence[str], length: int) -> np.ndarray:
        out = np.full((len(texts), int(length)), self.pad_id, np.int32)
        for i, text in enumerate(texts):
            ids = self._ids(text)[-int(length):] if text else []
            out[i, :len(ids)] = ids
        return out

    def command_ids(self, text: str) -> List[int]:
        return self._ids(text) + [self.pieces.end_of_turn]

    def prompt_tokens(self):
        """The policy's static pieces, a generating actor's prompt layout included."""
        return dataclasses.replace(self.pieces.prompt_tokens(self.pad_id),
                                   generation=self.pieces.generation_pieces(self.tokenizer))


def as_codec(tokenizer_or_codec):
    """A codec as is; a (word-level) tokenizer wrapped in a WordCodec."""
    if isinstance(tokenizer_or_codec, (WordCodec, ChatCodec)):
        return tokenizer_or_codec
    return WordCodec(tokenizer_or_codec)


class CommandEncoder:
    """Command text -> action tokens [A] (tokens, end token, PAD), cached; None if too long.

    `tokenizer` is a word-level tokenizer or a codec (WordCodec / ChatCodec)."""

    def __init__(self, tokenizer, action_len: int):
        self.codec, self.action_len = as_codec(tokenizer), int(action_len)
        self._cache: Dict[str, Optional[Tuple[int, ...]]] = {}
        self.stats = {"too_long": 0, "duplicates": 0, "over_budget": 0}

    def __call__(self, text: str) -> Optional[Tuple[int, ...]]:
        if text not in self._cache:
            ids = self.codec.command_ids(text)
            pad = [self.codec.pad_id] * (self.action_len - len(ids))
            self._cache[text] = (tuple(ids + pad) if 1 < len(ids) <= self.action_len
                                 else None)
        return self._cache[text]

    def candidates(self, commands: Sequence[str], max_candidates: int
                   ) -> Tuple[List[str], List[Tuple[int, ...]]]:
        """The kept commands and their tokens, deterministic: commands longer than A - 1
        tokens and duplicates of an earlier command's tokens are dropped; when more than
        `max_candidates` remain, observation-only commands (OBSERVE_VERBS) are dropped
        first, then the last ones in the game's order (the commands that change the game
        are kept)."""
        kept, seen = [], set()
        for c in commands:
            toks = self(c)
            if toks is None:
                self.stats["too_long"] += 1
            elif toks in seen:
                self.stats["duplicates"] += 1
            else:
                seen.add(toks)
                kept.append((c, toks))
        if len(kept) > max_candidates:
            self.stats["over_budget"] += len(kept) - max_candidates
            order = sorted(range(len(kept)), key=lambda i: (
                kept[i][0].split(" ", 1)[0] in OBSERVE_VERBS, i))
            keep = sorted(order[:max_candidates])
            kept = [kept[i] for i in keep]
        return [c for c, _ in kept], [t for _, t in kept]


def written_command(response: np.ndarray, mask: np.ndarray, codec, spec) -> str:
    """The command a game receives for a generated response the in-jit projection found
    invalid: verl-agent's rule on the response's text (asct_jax.envs.projection.project:
    the text between the action tags, or the last 30 characters), which the game parses
    itself (ScienceWorld answers "No known action matches that input." when it cannot).
    The tiny actor's response is its words joined by spaces, its tag ids written as tags;
    a pretrained model's is its tokenizer's decoding."""
    from asct_jax.envs.projection import TAG_STRINGS, project

    ids = [int(t) for t in response[mask] if int(t) != spec.stop_id]
    if isinstance(codec, ChatCodec):
        text = codec.tokenizer.decode(ids, skip_special_tokens=True)
    else:
        tags = {i[0]: t for i, t in zip(spec.tags, TAG_STRINGS) if len(i) == 1}
        text = " ".join(tags.get(i) or codec.tokenizer.decode([i]) for i in ids)
    return project(text, ())[0]


def task_text(state: HostState) -> str:
    """The task part of a host observation (HostEnv puts it first, before a blank line)."""
    return state.observation.split("\n\n", 1)[0]
