"""`PromptTokens`: the static token pieces a policy adds around what an environment gives it.

The defaults are the environments' own word vocabulary; `asct_jax.envs.text_interface`
gives a pretrained model's chat-template pieces. Used by `asct_jax.rl.policy`.

The hindsight teacher's prompt (SERL's and FACTOR's teacher, factor_jax.teacher) is SERL's
(OliverLeeXZ/SERL, recipe/serl/privileged_context.py: privileged_context_template around
its "immediate_feedback" section), one user message:

    {prompt}\\n\\nImmediate feedback from the current step:\\n{feedback}
    \\n\\nCorrectly solve the current task.\\n                     (one string: no break)

`serl_teacher_text` writes it; "appended" (TEACHER_PROMPTS) is this project's earlier one,
the feedback after the student's prompt (a chat view: a second user message "The result
of your next action will be:\\n{feedback}"; the word vocabulary: SEP feedback).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional, Tuple

from asct_jax.envs.base import PAD_ID, SEP_ID
from asct_jax.envs.projection import Tags


SERL_FEEDBACK_TITLE = "\n\nImmediate feedback from the current step:\n"
SERL_INSTRUCTION = "\n\nCorrectly solve the current task.\n"
TEACHER_PROMPTS = ("serl", "appended")


def serl_teacher_text(prompt: str, feedback: str) -> str:
    """SERL's teacher prompt (the module docstring) as text."""
    return prompt + SERL_FEEDBACK_TITLE + feedback + SERL_INSTRUCTION


def teacher_words() -> Tuple[str, ...]:
    """The words of SERL's teacher text in a lower-cased word vocabulary (\\w+ runs and
    punctuation runs, as the Whitespace pre-tokenizer splits them), in order of use."""
    words = re.findall(r"\w+|[^\w\s]+", (SERL_FEEDBACK_TITLE + SERL_INSTRUCTION).lower())
    return tuple(dict.fromkeys(words))


@dataclasses.dataclass(frozen=True)
class TeacherPrompt:
    """The hindsight teacher's prompt around the student's, as static ids:

        [prompt without its last `strip` real tokens | header | o_{t+1} | footer]

    (a chat view strips the user message's end and puts it back at the end of footer, so
    that the teacher reads one user message).
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
    teacher: the hindsight teacher's prompt in SERL's wording (TeacherPrompt; None: the
      shared environment vocabulary's, `asct_jax.envs.tokenizer.word_teacher_prompt`).
    teacher_appended: the earlier teacher prompt (TEACHER_PROMPTS "appended").
    generation: a generating actor's prompt layout (GenerationPieces) for this text, None
      for the defaults.
    The defaults are the environments' own word vocabulary: [obs | action], the teacher's
    [obs | SEP SEP immediate feedback from the current step : SEP feedback SEP SEP
    correctly solve the current task . SEP | action] (every newline a SEP, lower case),
    the earlier one [obs | SEP feedback | action].
    """

    pad_id: int = PAD_ID
    action_header: Tuple[int, ...] = ()
    teacher: Optional[TeacherPrompt] = None
    teacher_appended: TeacherPrompt = TeacherPrompt(header=(SEP_ID,))
    generation: Optional["GenerationPieces"] = None

    def teacher_prompt(self, name: str) -> Optional[TeacherPrompt]:
        """The teacher prompt `name` (TEACHER_PROMPTS) in these ids (None: SERL's in the
        shared environment vocabulary, asct_jax.envs.tokenizer.word_teacher_prompt)."""
        if name not in TEACHER_PROMPTS:
            raise ValueError(f"teacher prompt must be one of {TEACHER_PROMPTS}, got {name!r}")
        return self.teacher_appended if name == "appended" else self.teacher


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
