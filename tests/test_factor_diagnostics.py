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
