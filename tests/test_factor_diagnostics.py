"""Figure-5 diagnostics: conservation and calibration statistics."""
import jax.numpy as jnp
import numpy as np

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
    out = fj.conservation(fj.apm_weights(s, m), s, m)
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
    np.testing.assert_allclose(fj.credit_conservation_error(a, r, b, tm), [0.0, 0.0],
                               atol=1e-6)
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
