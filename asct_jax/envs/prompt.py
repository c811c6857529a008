"""`PromptTokens`: the static token pieces a policy adds around what an environment gives it.

The defaults are the environments' own word vocabulary; `asct_jax.envs.text_interface`
gives a pretrained model's chat-template pieces. Used by `asct_jax.rl.policy`.
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

from asct_jax.envs.base import PAD_ID, SEP_ID


@dataclasses.dataclass(frozen=True)
class PromptTokens:
    """Static token pieces the policy adds around what the environment gives it.

    pad_id: the padding id of observations, feedback and actions (never a real token).
    action_header: ids between the observation and the action (a chat template's
      assistant header). feedback_header / feedback_footer: ids around the hindsight
      feedback in the teacher's prompt.
    The defaults are the environments' own word vocabulary: [obs | action] and
    [obs | SEP feedback | action].
    """

    pad_id: int = PAD_ID
    action_header: Tuple[int, ...] = ()
    feedback_header: Tuple[int, ...] = (SEP_ID,)
    feedback_footer: Tuple[int, ...] = ()
