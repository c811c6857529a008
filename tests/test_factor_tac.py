"""TAC: telescoping, the boundary potentials, padding invariance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import pad_batch, random_batch

B, T, A = 3, 5, 6


@st.composite
def batches(draw, min_turns=1):
    seed = draw(st.integers(0, 2**31 - 1))
    turns = draw(st.lists(st.integers(min_turns, T), min_size=B, max_size=B))
    scale = draw(st.sampled_from([1e-3, 1.0, 100.0]))
    batch = random_batch(np.random.default_rng(seed), B, T, A, turn_lengths=turns)
    for k in ("rewards", "values", "baseline"):
        batch[k] = batch[k] * np.float32(scale)
    return batch


tac = jax.jit(fj.tac_credit)


def _tac(b):
    return tac(b["rewards"], b["values"], b["baseline"], b["turn_mask"])


def _reference(b):
    """Loops: V~(x_0) = b, V~(x_T_i) = 0, V_psi in between."""
    out = np.zeros_like(b["rewards"], dtype=np.float64)
    for i in range(b["rewards"].shape[0]):
        n = int(b["turn_mask"][i].sum())
        pot = [float(b["baseline"][i])] + [float(v) for v in b["values"][i, 1:n]] + [0.0]
        for t in range(n):
            out[i, t] = b["rewards"][i, t] + pot[t + 1] - pot[t]
    return out


@given(batches(min_turns=0))
def test_sum_telescopes_to_return_minus_baseline(b):
    credit = np.asarray(_tac(b), np.float64)
    n = b["turn_mask"].sum(-1)
    ret = np.where(b["turn_mask"], b["rewards"], 0).sum(-1)
    scale = 1.0 + np.abs(b["rewards"]).sum(-1) + np.abs(b["values"]).sum(-1)
    expected = np.where(n > 0, ret - b["baseline"], 0.0)  # an empty episode has no credit
    np.testing.assert_allclose(credit.sum(-1), expected, atol=1e-5 * scale.max())
    np.testing.assert_array_equal(credit[~b["turn_mask"]], 0.0)


@given(batches())
def test_matches_loop_reference(b):
    np.testing.assert_allclose(_tac(b), _reference(b), rtol=1e-5, atol=1e-4)


@given(batches(), st.integers(0, 2**31 - 1))
def test_padding_never_changes_the_result(b, seed):
    padded = pad_batch(b, extra_turns=2, extra_tokens=3, rng=np.random.default_rng(seed),
                       garbage=np.nan)
    out, out_pad = _tac(b), _tac(padded)
    np.testing.assert_array_equal(out_pad[:, :T], out)
    np.testing.assert_array_equal(out_pad[:, T:], 0.0)
    assert np.all(np.isfinite(out_pad))


def test_boundary_potentials_hand_case():
    rewards = jnp.array([[1.0, 2.0, 3.0], [5.0, 0.0, 0.0]])
    values = jnp.array([[9.0, 10.0, 20.0], [7.0, 8.0, 9.0]])
    baseline = jnp.array([4.0, 1.0])
    mask = jnp.array([[True, True, True], [True, False, False]])
    # ep 0: V~ = [4, 10, 20, 0] -> A* = [1+10-4, 2+20-10, 3+0-20]; ep 1: V~ = [1, 0] -> 5-1.
    np.testing.assert_allclose(fj.tac_credit(rewards, values, baseline, mask),
                               [[7.0, 12.0, -17.0], [4.0, 0.0, 0.0]])


def test_vmaps_over_groups():
    rng = np.random.default_rng(0)
    bs = [random_batch(rng, B, T, A) for _ in range(2)]
    stack = {k: np.stack([x[k] for x in bs]) for k in bs[0]}
    out = jax.vmap(fj.tac_credit)(stack["rewards"], stack["values"], stack["baseline"],
                                  stack["turn_mask"])
    for g in range(2):
        np.testing.assert_allclose(out[g], _tac(bs[g]), rtol=1e-6)


def test_rejects_bad_shapes_and_dtypes():
    b = random_batch(np.random.default_rng(0), B, T, A)
    with pytest.raises(AssertionError):
        fj.tac_credit(b["rewards"][0], b["values"], b["baseline"], b["turn_mask"])
    with pytest.raises(AssertionError):
        fj.tac_credit(b["rewards"], b["values"], b["baseline"], b["turn_mask"].astype(np.float32))
