"""Synthetic credit batches (NumPy) for property tests and benchmarks.

Nothing here is used by the kernels; it only builds well-formed inputs of given shapes
with per-episode turn counts T_i and per-action token counts L_t.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np


def masks_from_lengths(turn_lengths: Sequence[int], token_lengths: np.ndarray,
                       num_steps: int, action_len: int):
    """Prefix masks from lengths.

    Args:
      turn_lengths: [B] ints T_i in [0, T].
      token_lengths: [B, T] ints L_t in [1, A] (ignored on padded turns).
    Returns:
      (turn_mask [B, T] bool, token_mask [B, T, A] bool).
    """
    turn_lengths = np.asarray(turn_lengths)
    turn_mask = np.arange(num_steps)[None, :] < turn_lengths[:, None]
    token_lengths = np.asarray(token_lengths)
    token_mask = np.arange(action_len)[None, None, :] < token_lengths[..., None]
    return turn_mask, token_mask & turn_mask[..., None]


def random_batch(rng: np.random.Generator, batch: int, num_steps: int, action_len: int,
                 turn_lengths: Optional[Sequence[int]] = None,
                 token_lengths: Optional[np.ndarray] = None, scale: float = 1.0,
                 pad_value: float = 0.0) -> Dict[str, np.ndarray]:
    """A random FACTOR input batch.

    Returns a dict of NumPy arrays: rewards, values [B, T] float32; baseline [B] float32;
    turn_mask [B, T] bool; teacher_logp, student_logp, logp_old [B, T, A] float32
    (log-probs <= 0, of magnitude ~scale), logp = logp_old + 0.1 N(0, 1) (the updated
    policy's; above 0 on a few entries where logp_old is near 0, which the kernels, reading
    log-ratios, accept); token_mask [B, T, A] bool. Float entries off the
    masks are set to `pad_value` (use nan to check that padding is never read).
    """
    if turn_lengths is None:
        turn_lengths = rng.integers(1, num_steps + 1, size=batch)
    if token_lengths is None:
        token_lengths = rng.integers(1, action_len + 1, size=(batch, num_steps))
    turn_mask, token_mask = masks_from_lengths(turn_lengths, token_lengths, num_steps,
                                               action_len)
    f32 = np.float32
    out = {
        "rewards": rng.normal(size=(batch, num_steps)).astype(f32),
        "values": rng.normal(size=(batch, num_steps)).astype(f32),
        "baseline": rng.normal(size=(batch,)).astype(f32),
        "turn_mask": turn_mask,
        "token_mask": token_mask,
    }
    for name in ("teacher_logp", "student_logp", "logp_old"):
        out[name] = (-scale * rng.exponential(size=(batch, num_steps, action_len))).astype(f32)
    out["logp"] = (out["logp_old"] + 0.1 * rng.normal(size=out["logp_old"].shape)).astype(f32)
    for name in ("rewards", "values"):
        out[name] = np.where(turn_mask, out[name], f32(pad_value))
    for name in ("teacher_logp", "student_logp", "logp_old", "logp"):
        out[name] = np.where(token_mask, out[name], f32(pad_value))
    return out


def pad_batch(batch: Dict[str, np.ndarray], extra_turns: int, extra_tokens: int,
              rng: np.random.Generator, garbage: Optional[float] = np.nan
              ) -> Dict[str, np.ndarray]:
    """Appends padded turns / tokens and fills every masked entry with garbage.

    [B, T] arrays grow to [B, T + extra_turns] and [B, T, A] arrays to
    [B, T + extra_turns, A + extra_tokens]; masks grow with False; every float entry where
    the mask (turn_mask for [B, T], token_mask for [B, T, A]) is False becomes `garbage`
    (None: random junk of magnitude 1e3). [B] arrays are unchanged.
    """
    turn_mask = np.pad(batch["turn_mask"], [(0, 0), (0, extra_turns)])
    token_mask = np.pad(batch["token_mask"], [(0, 0), (0, extra_turns), (0, extra_tokens)])
    out = {}
    for name, x in batch.items():
        if x.ndim == 1:
            out[name] = x
            continue
        widths = [(0, 0), (0, extra_turns)] + ([(0, extra_tokens)] if x.ndim == 3 else [])
        padded = np.pad(x, widths)
        if x.dtype == bool:
            out[name] = padded
            continue
        mask = turn_mask if x.ndim == 2 else token_mask
        if garbage is None:
            junk = (1e3 * rng.normal(size=padded.shape)).astype(x.dtype)
        else:
            junk = np.full(padded.shape, garbage, x.dtype)
        out[name] = np.where(mask, padded, junk)
    return out
