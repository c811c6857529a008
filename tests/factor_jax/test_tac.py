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


# ------------------------------------------------------------ TAC's r_t (tac_rewards)

def test_tac_rewards_keep_the_step_rewards_hand_case():
    """The authors' r_t (trainer.py compute_action_credits: rewards[-1] = terminal).

    Episode 0 (leave-one-out, group G = (1, 0, 1)): env rewards (0.2, 0, 1), b = 0.5,
    terminal 1, A_seq = 0.5; V(x_1) = 0.6, V(x_2) = 0.9, so V~ = (0.5, 0.6, 0.9, 0):
      keep: r = (0.2, 0, 1)  A* = (0.2 + 0.6 - 0.5, 0 + 0.9 - 0.6, 1 + 0 - 0.9)
                                 = (0.3, 0.3, 0.1), sum 0.7 = A_seq + 0.2
      zero: r = (0, 0, 1)    A* = (0.1, 0.3, 0.1),  sum 0.5 = A_seq
    Episode 1 (2 turns): env rewards (0.5, -0.1), terminal 0: its last env reward is
    replaced, not added: keep r = (0.5, 0); zero r = (0, 0).
    """
    env_r = jnp.array([[0.2, 0.0, 1.0], [0.5, -0.1, 7.0]])
    terminal = jnp.array([1.0, 0.0])
    mask = jnp.array([[True, True, True], [True, True, False]])
    keep = fj.tac_rewards(env_r, terminal, mask)
    zero = fj.tac_rewards(env_r, terminal, mask, "zero")
    np.testing.assert_allclose(keep, [[0.2, 0.0, 1.0], [0.5, 0.0, 0.0]])
    np.testing.assert_allclose(zero, [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    values = jnp.array([[9.0, 0.6, 0.9], [9.0, 0.4, 9.0]])
    baseline = jnp.array([0.5, 0.0])
    a_keep = fj.tac_credit(keep, values, baseline, mask)
    a_zero = fj.tac_credit(zero, values, baseline, mask)
    # episode 1, V~ = (0, 0.4, 0): keep (0.5 + 0.4, 0 - 0.4); zero (0.4, -0.4).
    np.testing.assert_allclose(a_keep, [[0.3, 0.3, 0.1], [0.9, -0.4, 0.0]], atol=1e-6)
    np.testing.assert_allclose(a_zero, [[0.1, 0.3, 0.1], [0.4, -0.4, 0.0]], atol=1e-6)
    np.testing.assert_allclose(a_keep.sum(-1), [0.7, 0.5], atol=1e-6)


def test_tac_rewards_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="step_rewards"):
        fj.tac_rewards(jnp.zeros((1, 2)), jnp.zeros((1,)), jnp.ones((1, 2), bool), "sum")


@given(batches(min_turns=0), st.lists(st.floats(0.0, 1.0, width=32), min_size=B, max_size=B),
       st.sampled_from(fj.REWARD_RULES), st.sampled_from(fj.STEP_REWARDS))
def test_tac_credit_sums_to_a_seq_plus_the_kept_step_rewards(b, g, rule, mode):
    """sum_t A*_t = A_seq + sum_{t < T_i - 1} r^env_t ("keep"), A_seq ("zero"), for every
    reward rule (one group of B outcomes G) and any V_psi (0 for an episode without turns)."""
    g = jnp.asarray(g, jnp.float32)
    terminal, a_seq, base = fj.reward_construction(g, B, rule)
    mask = b["turn_mask"]
    r = fj.tac_rewards(b["rewards"], terminal, mask, mode)
    credit = np.asarray(fj.tac_credit(r, b["values"], base, mask), np.float64)
    n = mask.sum(-1)
    before_last = mask & (np.arange(T)[None, :] < (n - 1)[:, None])
    steps = np.where(before_last, b["rewards"], 0.0).sum(-1) if mode == "keep" else 0.0
    expected = np.where(n > 0, np.asarray(a_seq, np.float64) + steps, 0.0)
    scale = 1.0 + np.abs(b["rewards"]).sum(-1) + np.abs(b["values"]).sum(-1) + np.abs(
        np.asarray(a_seq)).max()
    np.testing.assert_allclose(credit.sum(-1), expected, atol=1e-5 * scale.max())
