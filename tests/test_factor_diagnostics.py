"""Figure-5 diagnostics: conservation and calibration statistics, perturbations, and the
choice tokens of constrained decoding."""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, strategies as st

import factor_jax as fj


def test_conservation_error():
    w = jnp.array([[[0.5, 1.5, 7.0], [0.2, 0.0, 0.0], [3.0, 3.0, 3.0]]])
    m = jnp.array([[[True, True, False], [True, False, False], [False, False, False]]])
    np.testing.assert_allclose(fj.conservation_error(w, m), [[0.0, 0.8, 0.0]], atol=1e-7)


def test_calibration_metrics():
    x = jnp.array([1.0, 2.0, 3.0, 100.0])
    m = jnp.array([True, True, True, False])
    out = fj.calibration_metrics(x, 2 * x + 1, m)
    np.testing.assert_allclose(out["corr"], 1.0, rtol=1e-6)
    np.testing.assert_allclose(out["bias"], -3.0, rtol=1e-6)  # mean(x - (2x + 1)) = -(2 + 1)
    np.testing.assert_allclose(out["count"], 3.0)


def test_extreme_tokens():
    w = jnp.array([[[0.5, 2.0, 0.1, 9.0]]])
    m = jnp.array([[[True, True, True, False]]])
    hi, lo = fj.extreme_tokens(w, m)
    assert int(hi[0, 0]) == 1 and int(lo[0, 0]) == 2


def test_conservation_of_apm_and_softmax_weights():
    s = jnp.array([[[0.3, -1.0, 2.0, 5.0], [0.0, 0.0, 0.0, 0.0]]])
    m = jnp.array([[[True, True, True, False], [False, False, False, False]]])
    out = fj.conservation(fj.apm_weights(s, m, 1.0), s, m)
    np.testing.assert_array_equal(out.real, [[True, False]])
    np.testing.assert_allclose(out.cons_apm, [[0.0, 0.0]], atol=1e-6)
    np.testing.assert_allclose(out.cons_softmax, [[1 - 1 / 3, 0.0]], atol=1e-6)
    np.testing.assert_allclose(out.weights_softmax.sum(-1), [[1.0, 0.0]], atol=1e-6)


def test_mc_credit_telescopes_to_return_minus_baseline():
    r = jnp.array([[0.0, 1.0, 2.0], [0.5, 0.0, 0.0]])
    v = jnp.array([[9.0, 3.0, -4.0], [7.0, 7.0, 7.0]])
    b = jnp.array([0.25, -1.0])
    tm = jnp.array([[True, True, True], [True, False, False]])
    a = fj.mc_credit(r, v, b, tm)
    ret = jnp.sum(jnp.where(tm, r, 0.0), axis=-1)
    np.testing.assert_allclose(jnp.sum(a, axis=-1), ret - b, atol=1e-6)   # sum A = G - b
    np.testing.assert_allclose(a[0], [3.0 - 0.25, 1.0 - 4.0 - 3.0, 2.0 + 4.0], atol=1e-6)


def test_perturbable_actions():
    credit = jnp.array([[1.0, -1.0, 1e-4, 2.0]])
    w = jnp.array([[[0.5, 1.5], [2.0, 0.0], [1.2, 0.8], [1.0, 0.0]]])
    m = jnp.array([[[True, True], [True, True], [True, True], [True, False]]])
    pos, neg, hi, lo = fj.perturbable_actions(credit, w, m, 1e-3)
    np.testing.assert_array_equal(pos, [[True, False, False, False]])  # one token: out
    np.testing.assert_array_equal(neg, [[False, True, False, False]])
    np.testing.assert_array_equal(hi[0, :3], [1, 0, 0])
    np.testing.assert_array_equal(lo[0, :3], [0, 1, 1])


def test_perturbed_actions_delete_swap_unk():
    filler, unk = 7, 9
    actions = jnp.array([[1, 2, 3]])
    cands = jnp.array([[[1, 2, 3], [1, 5, 3], [4, 2, 6]]])
    legal = jnp.array([[True, True, True]])
    hi, lo = jnp.array([1]), jnp.array([0])
    var = fj.perturbed_actions(actions, hi, lo, cands, legal, ("delete", "swap", "unk"),
                               filler, unk)
    assert var.shape == (1, 7, 3)
    np.testing.assert_array_equal(var[0], [
        [1, 2, 3],                       # original
        [1, 7, 3], [7, 2, 3],            # delete hi, lo
        [1, 5, 3], [7, 2, 3],            # swap hi (candidate 1), lo (none: filler)
        [1, 9, 3], [9, 2, 3],            # unk hi, lo
    ])


def test_divisor_at_most():
    from factor_jax.diagnostics import divisor_at_most
    assert divisor_at_most(12, 5) == 4 and divisor_at_most(7, 100) == 7
    assert divisor_at_most(7, 3) == 1


# ------------------------------------------------------------------ choice tokens

def _choice_reference(actions, cands, legal, token_mask):
    """Brute force: token j is a choice iff the legal candidates sharing y_<j have more
    than one distinct token at j."""
    out = np.zeros(token_mask.shape, bool)
    for idx in np.ndindex(token_mask.shape[:-1]):
        y = actions[idx]
        for j in range(y.shape[0]):
            nxt = {int(c[j]) for c, ok in zip(cands[idx], legal[idx])
                   if ok and np.array_equal(c[:j], y[:j])}
            out[idx + (j,)] = token_mask[idx + (j,)] and len(nxt) > 1
    return out


def test_choice_tokens_hand_case():
    # Candidates (EOS = 1, PAD = 0): "5 7", "5 8", "6", "5 7 9" (illegal).
    cands = jnp.array([[[5, 7, 1, 0], [5, 8, 1, 0], [6, 1, 0, 0], [5, 7, 9, 1]]])
    legal = jnp.array([[True, True, True, False]])
    act = cands[:, 0]
    mask = act != 0
    # 5: vs 6 (a choice); 7: vs 8 (a choice); EOS: "5 7 9" is illegal (forced).
    np.testing.assert_array_equal(fj.choice_tokens(act, cands, legal, mask),
                                  [[True, True, False, False]])
    legal = legal.at[0, 3].set(True)   # now EOS vs 9 is a choice too
    np.testing.assert_array_equal(fj.choice_tokens(act, cands, legal, mask),
                                  [[True, True, True, False]])
    only = jnp.array([[True, False, False, False]])   # a single legal candidate
    assert not np.any(fj.choice_tokens(act, cands, only, mask))
    masked = mask.at[0, 1].set(False)   # never outside token_mask
    assert not fj.choice_tokens(act, cands, legal, masked)[0, 1]


@given(st.integers(0, 2**31 - 1))
def test_choice_tokens_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, k, a = 6, 5, 4
    cands = rng.integers(2, 5, size=(n, k, a)).astype(np.int32)   # small vocab: shared prefixes
    lens = rng.integers(1, a + 1, size=(n, k))
    cands = np.where(np.arange(a) < lens[..., None], cands, 0)
    legal = rng.random((n, k)) < 0.7
    legal[:, 0] = True
    act = cands[:, 0]
    mask = act != 0
    got = np.asarray(jax.jit(fj.choice_tokens)(act, cands, legal, mask))
    np.testing.assert_array_equal(got, _choice_reference(act, cands, legal, mask))
