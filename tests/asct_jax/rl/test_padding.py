"""asct_jax.rl.padding."""
import jax.numpy as jnp
import numpy as np

from asct_jax.rl.padding import left_align


def test_left_align_moves_padding_left():
    x = jnp.array([[7, 8, 0, 0], [1, 2, 3, 4], [0, 0, 0, 0]])
    np.testing.assert_array_equal(left_align(x), [[0, 0, 7, 8], [1, 2, 3, 4], [0, 0, 0, 0]])
