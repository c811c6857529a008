"""How an update splits a batch (asct_jax.rl.minibatches)."""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

from asct_jax.rl import minibatches as mbs


def _rows(turn_mask):
    """A [B, T] batch whose leaf `id` names each turn row b * T + t."""
    b, t = turn_mask.shape
    return {"id": jnp.arange(b * t, dtype=jnp.int32).reshape(b, t) + 1,
            "turn_mask": jnp.asarray(turn_mask), "episode": jnp.arange(b) + 1,
            "scale": jnp.float32(2.0)}


def test_turn_rows_reshape_per_turn_and_repeat_per_episode():
    rows = mbs.to_turn_rows(_rows(np.ones((2, 3), bool)), 2, 3)
    assert rows["id"].shape == (6, 1) and rows["turn_mask"].shape == (6, 1)
    np.testing.assert_array_equal(rows["episode"], [1, 1, 1, 2, 2, 2])
    assert rows["scale"].shape == ()


def test_step_minibatches_by_hand():
    # Episode 0 has 1 real turn, episode 1 has 3 (T = 3): 4 real rows; size 2 ->
    # ceil(6 / 2) = 3 minibatches: the 4 real rows fill the first two, the third is padding.
    mask = np.array([[1, 0, 0], [1, 1, 1]], bool)
    rows = mbs.to_turn_rows(_rows(mask), 2, 3)
    out = mbs.split_turn_rows(rows, jax.random.key(0), jnp.asarray(mask), 2)
    ids = np.asarray(out["id"])[..., 0]
    assert ids.shape == (3, 2)
    assert sorted(ids[:2].ravel()) == [1, 4, 5, 6]          # rows (0,0), (1,0), (1,1), (1,2)
    assert not np.asarray(out["turn_mask"])[2].any()        # only padding or masked rows
    live = [bool(mbs.has_real_turns(out["turn_mask"][i])) for i in range(3)]
    assert live == [True, True, False]                      # 2 updates = ceil(4 / 2)
    np.testing.assert_array_equal(np.asarray(out["scale"]), [2.0, 2.0, 2.0])


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(1, 7), st.integers(0, 2 ** 16))
def test_every_real_turn_is_in_exactly_one_minibatch(b, t, size, seed):
    rng = np.random.default_rng(seed)
    mask = rng.random((b, t)) < 0.6
    rows = mbs.to_turn_rows(_rows(mask), b, t)
    out = mbs.split_turn_rows(rows, jax.random.key(seed), jnp.asarray(mask), size)
    ids = np.asarray(out["id"])[..., 0]
    real = np.asarray(out["turn_mask"])[..., 0]
    expect = sorted((np.arange(b * t) + 1)[mask.ravel()])
    assert sorted(ids[real]) == expect
    # Real rows come first: only the last live minibatch may be partly padding.
    n_live = sum(bool(r.any()) for r in real)
    assert n_live == -(-int(mask.sum()) // size)


def test_episode_minibatches_are_a_permutation_cut_evenly():
    tree = {"x": jnp.arange(8) * 10, "c": jnp.float32(1.0)}
    out = mbs.split_episodes(tree, jax.random.key(3), 4, 8)
    assert out["x"].shape == (4, 2) and out["c"].shape == (4,)
    assert sorted(np.asarray(out["x"]).ravel()) == list(range(0, 80, 10))
