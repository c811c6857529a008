"""asct_jax.models.widths: the static widths, the max over every vmapped lane, a pass on
the columns that hold the rows (right and left padded) equal to the pass on all of them."""
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.models import widths


def test_widths_and_lanes_max_over_nested_vmaps():
    """widths: ceil(P i / buckets); lanes_max: the max over every lane of nested vmaps
    (also inside a vmapped while loop), one value, so a switch on it takes one branch."""
    assert widths.widths(226, 4) == (57, 113, 170, 226)
    assert widths.widths(226, 1) == (226,)
    x = jax.random.normal(jax.random.key(0), (4, 3))

    def one(v):                                          # one lane: [] -> []
        def body(c):
            top = widths.lanes_max(v)
            branch = jax.lax.switch((top > 0).astype(jnp.int32),
                                    [lambda: jnp.float32(0), lambda: jnp.float32(1)])
            return c[0] + top + branch, c[1] + 1
        return jax.lax.while_loop(lambda c: c[1] < 2 + (v > 0), body, (0.0, 0))[0]

    lanes = jax.vmap(jax.vmap(one))
    got = jax.jit(lanes)(x)
    # a batched index would have made the switch a select_n of both branches
    assert "cond[" in str(jax.make_jaxpr(lanes)(x))
    top = float(jnp.max(x))
    want = np.where(np.asarray(x) > 0, 3, 2) * (top + 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert float(widths.lanes_max(jnp.float32(2.5))) == 2.5


def test_on_columns_equals_the_pass_on_every_column_left_and_right_padded():
    """right_padded / left_padded run fn on the fewest columns (of widths) that hold every
    row; a pass whose padding does not count (a masked sum) gives the full pass's values,
    under vmap too (one width for all lanes: the longest lane's)."""
    rng = np.random.default_rng(0)
    n = rng.integers(1, 9, size=6)
    ids = np.where(np.arange(20)[None] < n[:, None], rng.integers(1, 9, size=(6, 20)), 0)
    seen = []

    def total(x):                                          # [N, W] -> [N], its width noted
        seen.append(x.shape[1])
        return jnp.sum(x * jnp.arange(1, x.shape[1] + 1), axis=1)

    right = widths.right_padded(total, jnp.asarray(ids), 0, buckets=4)
    np.testing.assert_array_equal(right, total(jnp.asarray(ids)))
    assert seen[:4] == [5, 10, 15, 20]                     # one branch traced per width
    left_ids = jnp.asarray(ids[:, ::-1].copy())            # left padded, the same rows
    flip = lambda x, m: jnp.sum(x[:, ::-1] * jnp.arange(1, x.shape[1] + 1),  # noqa: E731
                                axis=1)                    # (counted from the end)
    left = widths.left_padded(flip, left_ids, left_ids != 0, buckets=4)
    np.testing.assert_array_equal(left, right)
    lanes = jax.vmap(lambda r: widths.right_padded(total, r[None], 0, buckets=4)[0])
    np.testing.assert_array_equal(jax.jit(lanes)(jnp.asarray(ids)), right)
    assert "cond[" in str(jax.make_jaxpr(lanes)(jnp.asarray(ids)))
