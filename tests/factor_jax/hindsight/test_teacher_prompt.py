"""factor_jax/hindsight/teacher_prompt.py: teacher_frame picks the policy's frame by name
(and rejects others); teacher_prefix is, row for row, [obs without its last `strip` real
tokens | header | feedback | footer] with every PAD moved right, against a NumPy reference
(PAD anywhere in obs and feedback, a policy pad id other than 0), and refuses a frame whose
ids pass the policy's vocabulary. (SERL's default text in the word vocabulary and a chat
template's: tests/factor_jax/test_serl.py, tests/asct_jax/envs/test_text_interface.py.)"""
import types

import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

from asct_jax.envs.prompt import FeedbackFrame, PromptTokens
from factor_jax.hindsight.teacher_prompt import TEACHER_PROMPTS, teacher_frame, teacher_prefix

PAD = 7          # not the environments' PAD_ID (0): the function must use policy.pad_id


def _policy(frame=None, appended=FeedbackFrame(header=(1,)), vocab=100, pad=PAD):
    prompt = PromptTokens(pad_id=pad, feedback_frame=frame, appended_frame=appended)
    return types.SimpleNamespace(prompt=prompt, pad_id=pad, vocab_size=vocab)


def _reference(obs, feedback, frame, pad):
    """NumPy: each row's real obs tokens less the last `strip`, header, real feedback
    tokens, footer, then PAD to the full width."""
    width = obs.shape[1] + len(frame.header) + feedback.shape[1] + len(frame.footer)
    rows = []
    for o, f in zip(obs, feedback):
        real = [int(x) for x in o if x != pad]
        real = real[:max(len(real) - frame.strip, 0)]
        row = real + list(frame.header) + [int(x) for x in f if x != pad] + list(frame.footer)
        rows.append(row + [pad] * (width - len(row)))
    return np.asarray(rows, np.int32)


def test_teacher_frame_is_the_policys_frame_of_that_name():
    serl, appended = FeedbackFrame((3,), (4,), 1), FeedbackFrame((5,))
    p = _policy(serl, appended).prompt
    assert teacher_frame(p, "serl") is serl and teacher_frame(p, "appended") is appended
    assert teacher_frame(PromptTokens(), "serl") is None        # the word vocabulary's
    assert set(TEACHER_PROMPTS) == {"serl", "appended"}
    with pytest.raises(ValueError, match=r"one of \('serl', 'appended'\), got 'SERL'"):
        teacher_frame(p, "SERL")


def test_hand_case_strips_frames_and_moves_pad_right():
    frame = FeedbackFrame(header=(50, 51), footer=(60,), strip=1)
    obs = jnp.asarray([[PAD, 10, 11, 12], [20, PAD, 21, PAD]], jnp.int32)
    fb = jnp.asarray([[30, PAD, 31], [PAD, PAD, PAD]], jnp.int32)
    got = np.asarray(teacher_prefix(_policy(frame), obs, fb))
    P = PAD
    np.testing.assert_array_equal(got, [[10, 11, 50, 51, 30, 31, 60, P, P, P],
                                        [20, 50, 51, 60, P, P, P, P, P, P]])
    # "appended": the policy's appended frame, no strip
    got = np.asarray(teacher_prefix(_policy(frame), obs, fb, "appended"))
    np.testing.assert_array_equal(got, [[10, 11, 12, 1, 30, 31, P, P],
                                        [20, 21, 1, P, P, P, P, P]])
    with pytest.raises(ValueError, match="teacher prompt must be one of"):
        teacher_prefix(_policy(frame), obs, fb, "other")


@given(st.integers(0, 2**31 - 1), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2),
       st.booleans())
def test_prefix_is_the_numpy_reference(seed, n_header, n_footer, strip, appended):
    """Any PAD pattern, frame length and strip (also more than a row's real tokens)."""
    r = np.random.default_rng(seed)
    n, o, f = 4, 6, 3
    tokens = lambda shape: np.where(r.random(shape) < 0.35, PAD,      # noqa: E731
                                    r.choice([t for t in range(1, 40) if t != PAD], shape))
    obs, fb = tokens((n, o)).astype(np.int32), tokens((n, f)).astype(np.int32)
    frame = FeedbackFrame(tuple(r.integers(40, 100, n_header)),
                          tuple(r.integers(40, 100, n_footer)), strip)
    policy = _policy(None if appended else frame, appended=frame)
    got = teacher_prefix(policy, jnp.asarray(obs), jnp.asarray(fb),
                         "appended" if appended else "serl")
    assert got.dtype == jnp.int32 and got.shape == (n, o + n_header + f + n_footer)
    np.testing.assert_array_equal(np.asarray(got), _reference(obs, fb, frame, PAD))


def test_a_frame_past_the_vocabulary_is_refused_and_its_last_id_is_not():
    frame = FeedbackFrame(header=(5,), footer=(99,))
    obs = jnp.asarray([[1, 2]], jnp.int32)
    fb = jnp.asarray([[3]], jnp.int32)
    np.testing.assert_array_equal(teacher_prefix(_policy(frame, vocab=100), obs, fb),
                                  [[1, 2, 5, 3, 99]])
    with pytest.raises(ValueError, match=r"reach 99, past the policy's vocabulary \(99\)"):
        teacher_prefix(_policy(frame, vocab=99), obs, fb)
    empty = teacher_prefix(_policy(FeedbackFrame(), vocab=1), obs, fb)   # nothing to check
    np.testing.assert_array_equal(empty, [[1, 2, 3]])
