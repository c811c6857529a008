"""`PromptTokens`: the static token pieces a policy adds around what an environment gives it.

The defaults are the environments' own word vocabulary; `asct_jax.envs.text_interface`
gives a pretrained model's chat-template pieces. Used by `asct_jax.rl.policy`.

The environments' neutral hook for a step's feedback text around a prompt (a
`FeedbackFrame`; the methods that read it, and which frame they name, are a method
package's, e.g. factor_jax's). The feedback frame is one user message:

    {prompt}\\n\\nImmediate feedback from the current step:\\n{feedback}
    \\n\\nCorrectly solve the current task.\\n                     (one string: no break)

`render_feedback` writes it; the appended frame is the feedback after the prompt (a chat
view: a second user message "The result of your next action will be:\\n{feedback}"; the
word vocabulary: SEP feedback).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional, Tuple

from asct_jax.envs.base import PAD_ID, SEP_ID
from asct_jax.envs.projection import Tags


FEEDBACK_TITLE = "\n\nImmediate feedback from the current step:\n"
FEEDBACK_INSTRUCTION = "\n\nCorrectly solve the current task.\n"


def render_feedback(prompt: str, feedback: str) -> str:
    """The feedback frame (the module docstring) around `feedback` after `prompt`, as text."""
    return prompt + FEEDBACK_TITLE + feedback + FEEDBACK_INSTRUCTION


def feedback_words() -> Tuple[str, ...]:
    """The words of the feedback frame's text in a lower-cased word vocabulary (\\w+ runs
    and punctuation runs, as the Whitespace pre-tokenizer splits them), in order of use."""
    words = re.findall(r"\w+|[^\w\s]+", (FEEDBACK_TITLE + FEEDBACK_INSTRUCTION).lower())
    return tuple(dict.fromkeys(words))


@dataclasses.dataclass(frozen=True)
class FeedbackFrame:
    """A step's feedback o_{t+1} framed after a prompt, as static ids:

        [prompt without its last `strip` real tokens | header | o_{t+1} | footer]

    (a chat view strips the user message's end and puts it back at the end of footer, so
    that the framed prompt is one user message).
    """

    header: Tuple[int, ...] = ()
    footer: Tuple[int, ...] = ()
    strip: int = 0


@dataclasses.dataclass(frozen=True)
class PromptTokens:
    """Static token pieces the policy adds around what the environment gives it.

    pad_id: the padding id of observations, feedback and actions (never a real token).
    action_header: ids between the observation and the action (a chat template's
      assistant header).
    feedback_frame: the feedback frame (FeedbackFrame, the module docstring's wording;
      None: the shared environment vocabulary's, `asct_jax.envs.tokenizer.
      word_feedback_frame`).
    appended_frame: the feedback appended after the prompt (a FeedbackFrame).
    generation: a generating actor's prompt layout (GenerationPieces) for this text, None
      for the defaults.
    The defaults are the environments' own word vocabulary: [obs | action], the framed
    [obs | SEP SEP immediate feedback from the current step : SEP feedback SEP SEP
    correctly solve the current task . SEP | action] (every newline a SEP, lower case),
    the appended one [obs | SEP feedback | action].
    """

    pad_id: int = PAD_ID
    action_header: Tuple[int, ...] = ()
    feedback_frame: Optional[FeedbackFrame] = None
    appended_frame: FeedbackFrame = FeedbackFrame(header=(SEP_ID,))
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
