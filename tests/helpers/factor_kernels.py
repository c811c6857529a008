"""The batch layout, sizes and masks of the tests that check factor_jax's kernels against
the FACTOR authors' code (tests/factor_jax/test_rewards.py, test_schedules.py,
test_hta_authors.py, test_tac_authors.py, test_checkpoints.py, test_losses.py,
test_serl_authors.py).

Layout: B episodes, T turns, A token slots per turn; the authors' flat token streams with
action spans map to one action per turn, non-action tokens in any free slot (the
aggregations are over the whole batch, so where they sit does not matter).
"""
import jax.numpy as jnp
from hypothesis import settings

from factor_jax.synthetic import masks_from_lengths
from tests.helpers.tiers import examples

B, T, A = 3, 5, 6
PROPS = settings(max_examples=examples(30), deadline=None)


def f32(x):
    return jnp.asarray(x, jnp.float32)


def masks(rng, turns=None, min_len=0):
    """turn_mask [B, T], token_mask [B, T, A] with per-action lengths in [min_len, A]."""
    if turns is None:
        turns = rng.integers(0, T + 1, size=B)
    lengths = rng.integers(min_len, A + 1, size=(B, T))
    return masks_from_lengths(turns, lengths, T, A)
