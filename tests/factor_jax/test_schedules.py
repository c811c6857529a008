"""factor_jax.schedules (eta, the KL weight, scale_steps) against the FACTOR authors' code:
their unit tests' hand-worked numbers (re-derived here), and properties (the schedules'
bounds, with SERL's lambda).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from tests.helpers.factor_kernels import PROPS


def test_eta_schedule_hand_case():
    for k in (0, 1, 10, 50, 100):
        assert float(fj.eta_schedule(k)) == 0.0  # warm-up, and inactive from step 50
    np.testing.assert_allclose(fj.eta_schedule(11), 0.7 * (1 - 11 / 50), rtol=1e-6)  # 0.546
    np.testing.assert_allclose(fj.eta_schedule(20), 0.42, rtol=1e-6)
    assert float(fj.eta_schedule(49)) > 0.0
    jitted = jax.jit(fj.eta_schedule)
    np.testing.assert_allclose(jitted(jnp.int32(11)), 0.546, rtol=1e-6)
    assert float(jitted(jnp.int32(10))) == 0.0 and float(jitted(jnp.int32(50))) == 0.0
    # A short run's window: eta0 (1 - k / decay) on [start, end] only.
    np.testing.assert_allclose(fj.eta_schedule(3, eta0=1.0, start=3, end=9, decay=10), 0.7,
                               rtol=1e-6)
    assert float(fj.eta_schedule(10, eta0=1.0, start=3, end=12, decay=10)) == 0.0


def test_kl_schedule_hand_case():
    np.testing.assert_allclose(fj.kl_schedule(20), 0.6, rtol=1e-6)  # lambda_20 = 1 - 20/50
    np.testing.assert_allclose(fj.kl_schedule(1), 0.98, rtol=1e-6)
    np.testing.assert_allclose(fj.kl_schedule(0), 0.98, rtol=1e-6)  # max(step, 1)
    assert float(fj.kl_schedule(50)) == 0.0 and float(fj.kl_schedule(80)) == 0.0
    np.testing.assert_allclose(jax.jit(fj.kl_schedule)(jnp.int32(25)), 0.5, rtol=1e-6)


def test_scale_steps_hand_case():
    assert [fj.scale_steps(n, 150) for n in (10, 11, 49, 50)] == [10, 11, 49, 50]
    assert [fj.scale_steps(n, 75) for n in (10, 11, 49, 50)] == [5, 6, 25, 25]
    assert [fj.scale_steps(n, 30) for n in (10, 11, 49, 50)] == [2, 2, 10, 10]
    assert fj.scale_steps(10, 3) == 1 and fj.scale_steps(0, 75) == 0
    assert fj.scale_steps(50, 300) == 100
    for bad in (dict(n=-1, steps=10), dict(n=10, steps=0), dict(n=1.5, steps=10)):
        with pytest.raises(ValueError):
            fj.scale_steps(**bad)


@PROPS
@given(st.integers(0, 100), st.integers(1, 400), st.integers(1, 300))
def test_scale_steps_rounds(n, steps, reference):
    got = fj.scale_steps(n, steps, reference)
    assert isinstance(got, int)
    exact = n * steps / reference
    assert fj.scale_steps(n, reference, reference) == n
    if n >= 1:
        assert got >= 1
        assert got == 1 or abs(got - exact) <= 0.5
    else:
        assert got == 0


@PROPS
@given(st.integers(1, 200))
def test_schedules_bounds(k):
    eta = float(fj.eta_schedule(k))
    assert 0.0 <= eta <= 0.7 and (eta > 0) == (11 <= k <= 49)
    lam = float(fj.kl_schedule(k))
    assert 0.0 <= lam < 1.0 and (lam > 0) == (k < 50)
    s = float(fj.serl_lambda(k))
    assert 0.0 <= s <= 0.5 and (s > 0) == (k < 51)
