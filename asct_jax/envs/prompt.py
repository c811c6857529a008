"""`PromptTokens`: the static token pieces a policy adds around what an environment gives it.

The defaults are the environments' own word vocabulary; `asct_jax.envs.text_interface`
gives a pretrained model's chat-template pieces. Used by `asct_jax.rl.policy`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

from asct_jax.envs.base import PAD_ID, SEP_ID
from asct_jax.envs.projection import Tags


@dataclasses.dataclass(frozen=True)
class PromptTokens:
    """Static token pieces the policy adds around what the environment gives it.

    pad_id: the padding id of observations, feedback and actions (never a real token).
    action_header: ids between the observation and the action (a chat template's
      assistant header). feedback_header / feedback_footer: ids around the hindsight
      feedback in the teacher's prompt.
    generation: a generating actor's prompt layout (GenerationPieces) for this text, None
      for the defaults.
    The defaults are the environments' own word vocabulary: [obs | action] and
    [obs | SEP feedback | action].
    """

    pad_id: int = PAD_ID
    action_header: Tuple[int, ...] = ()
    feedback_header: Tuple[int, ...] = (SEP_ID,)
    feedback_footer: Tuple[int, ...] = ()
    generation: Optional["GenerationPieces"] = None


@dataclasses.dataclass(frozen=True)
class GenerationPieces:
    """The static layout of a generating actor's prompt (asct_jax.rl.generation.build_prompt):

        head [obs_label x_i act_label <action> a_i </action>]_{i < t} cur_label x_t
        list_header (c_k item_sep)_k tail

    strip_head / strip_tail: template tokens at the start / end of every observation that
    the prompt drops (a chat view's user-message head and tail: the prompt is one message).
    tags, stop_id: the tag ids and the end-of-turn id in this text (None: the caller's,
    the tiny actor's tag tokens after its words and EOS).
    tokenizer: a pretrained tokenizer, or None. With one, the response is projected on
    its decoded text (asct_jax.envs.projection.project); without, on token ids. Not part
    of the equality / hash (a static value under jit).
    The defaults are the tiny actor's: "history x_t SEP c_1 SEP ... c_K SEP".
    """

    head: Tuple[int, ...] = ()
    obs_label: Tuple[int, ...] = ()
    act_label: Tuple[int, ...] = ()
    cur_label: Tuple[int, ...] = ()
    list_header: Tuple[int, ...] = (SEP_ID,)
    item_sep: Tuple[int, ...] = (SEP_ID,)
    tail: Tuple[int, ...] = ()
    strip_head: int = 0
    strip_tail: int = 0
    tags: Optional[Tags] = None
    stop_id: Optional[int] = None
    tokenizer: Any = dataclasses.field(default=None, compare=False, repr=False)

    def fixed_len(self, history: int) -> int:
        """Tokens of the pieces themselves in a prompt with `history` past steps."""
        return (len(self.head) + history * (len(self.obs_label) + len(self.act_label))
                + len(self.cur_label) + len(self.list_header) + len(self.tail))
